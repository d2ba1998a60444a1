// Loading plugins: by path and through plugin.path, once per file, and every way a shared
// object can be refused, each with the file and the reason in the message.
#include "transform/plugin_loader.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "plugin_test_support.h"

namespace walrelay {
namespace {

using testing::Contains;
using testing::TestPluginFile;

// A scratch directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "walrelay-plugins-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string LoadError(const std::string& path) {
  auto library = PluginLibrary::Load(path);
  REQUIRE_FALSE(library.ok());
  CHECK(library.status().code() == ErrorCode::kConfig);
  return library.status().message();
}

TEST_CASE("a plugin loads by path and describes itself") {
  auto library = PluginLibrary::Load(TestPluginFile("test_transform"));
  REQUIRE_MESSAGE(library.ok(), library.status().ToString());
  CHECK((*library)->name() == "test_transform");
  CHECK((*library)->version() == "0.1");
  CHECK((*library)->Describe() ==
        "plugin 'test_transform' (" + TestPluginFile("test_transform") + ")");
  CHECK((*library)->api().abi_version == WALRELAY_TRANSFORM_ABI_VERSION);
  CHECK((*library)->api().struct_size == sizeof(walrelay_transform_plugin));
}

TEST_CASE("a name resolves to <name>.so in the first plugin.path directory that has it") {
  TempDir empty;
  TempDir first;
  const std::string copy = first.path() + "/test_transform.so";
  std::filesystem::create_symlink(TestPluginFile("test_transform"), copy);
  PluginLoader loader({empty.path(), first.path(), WALRELAY_TEST_PLUGIN_DIR});
  CHECK(*loader.Resolve("test_transform") == copy);
  CHECK(*loader.Resolve("test_transform.so") == copy);
  CHECK(*loader.Resolve("wrong_abi") == TestPluginFile("wrong_abi"));
  // A type with a '/' is a path and plugin.path is not consulted.
  CHECK(*loader.Resolve(TestPluginFile("test_transform")) == TestPluginFile("test_transform"));

  const Status missing = loader.Resolve("nothere").status();
  CHECK(missing.message() == "no file 'nothere.so' in 'plugin.path' (" + empty.path() + ", " +
                                 first.path() + ", " + WALRELAY_TEST_PLUGIN_DIR + ")");
  CHECK(loader.Resolve("/no/such/plugin.so").status().message() ==
        "plugin file '/no/such/plugin.so' does not exist");
  CHECK(Contains(PluginLoader({}).Resolve("filter").status().message(),
                 "'plugin.path' is not set, so no directory is searched for 'filter.so'"));
}

TEST_CASE("a file is loaded once, however it is reached") {
  TempDir dir;
  const std::string link = dir.path() + "/alias.so";
  std::filesystem::create_symlink(TestPluginFile("test_transform"), link);
  PluginLoader loader({WALRELAY_TEST_PLUGIN_DIR});
  auto first = loader.Load(TestPluginFile("test_transform"));
  auto again = loader.Load(*loader.Resolve("test_transform"));
  auto linked = loader.Load(link);
  REQUIRE(first.ok());
  REQUIRE(again.ok());
  REQUIRE(linked.ok());
  CHECK(first->get() == again->get());
  CHECK(first->get() == linked->get());
}

TEST_CASE("a plugin built for another ABI version is refused, naming both versions") {
  const std::string message = LoadError(TestPluginFile("wrong_abi"));
  CHECK(message == "plugin file '" + TestPluginFile("wrong_abi") +
                       "' was built for transform ABI version 2, but this walrelay has version 1; "
                       "rebuild it against this walrelay's include/walrelay/transform.h");
}

TEST_CASE("a plugin whose entry function refuses this host's ABI version is refused") {
  CHECK(LoadError(TestPluginFile("refuses_host")) ==
        "plugin file '" + TestPluginFile("refuses_host") +
            "' does not support transform ABI version 1 (its entry function returned NULL); "
            "rebuild it against this walrelay's include/walrelay/transform.h");
}

TEST_CASE("a shared object without the entry symbol is refused") {
  const std::string message = LoadError(TestPluginFile("no_entry"));
  CHECK_MESSAGE(Contains(message, "plugin file '" + TestPluginFile("no_entry") +
                                      "' has no 'walrelay_transform_entry' symbol"),
                message);
  CHECK_MESSAGE(Contains(message, "undefined symbol: walrelay_transform_entry"), message);
}

TEST_CASE("a descriptor too short for ABI version 1 or without a callback is refused") {
  CHECK(Contains(LoadError(TestPluginFile("short")),
                 "' has a descriptor of 8 bytes; ABI version 1 needs at least " +
                     std::to_string(sizeof(walrelay_transform_plugin))));
  CHECK(LoadError(TestPluginFile("no_apply")) ==
        "plugin 'broken' (" + TestPluginFile("no_apply") + ") lacks required callback(s): apply");
}

TEST_CASE("a file that is not a shared object is refused with the loader's reason") {
  TempDir dir;
  const std::string path = dir.path() + "/notes.so";
  std::ofstream(path) << "not an ELF file\n";
  const std::string message = LoadError(path);
  CHECK_MESSAGE(Contains(message, "cannot load plugin file '" + path + "': "), message);
  CHECK_MESSAGE(Contains(message, "notes.so"), message);
}

TEST_CASE("a plugin whose create() fails stops the chain's build, naming alias, plugin and file") {
  const Status st = testing::BuildError(TestPluginFile("test_transform"), {{"bogus", "1"}});
  CHECK(st.code() == ErrorCode::kConfig);
  CHECK(st.message() == "transform 't': plugin 'test_transform' (" +
                            TestPluginFile("test_transform") +
                            ") failed to start: unknown key 'bogus'");
  const Status load = testing::BuildError(TestPluginFile("wrong_abi"));
  CHECK_MESSAGE(
      Contains(load.message(), "transform 't': plugin file '" + TestPluginFile("wrong_abi") +
                                   "' was built for transform ABI version 2"),
      load.message());
}

TEST_CASE("plugins log through the host with their alias and name; destroy runs with the chain") {
  testing::LogCapture log;
  {
    TransformChain chain = testing::OneTransform(TestPluginFile("test_transform"), {}, "audit");
    CHECK(Contains(log.text(), "[info] transform 'audit' (test_transform): created audit for "
                               "orders-outbox"));
    CHECK_FALSE(Contains(log.text(), "destroyed audit"));
  }
  CHECK(Contains(log.text(), "[info] transform 'audit' (test_transform): destroyed audit"));
}

}  // namespace
}  // namespace walrelay
