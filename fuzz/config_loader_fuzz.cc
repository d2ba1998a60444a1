// libFuzzer target for the config loader: arbitrary bytes as a connector config file, through
// ParseConnectorConfig, ParseRelaySettings and TransformChain::Build, as `walrelay run` and
// `validate` take them.
//
// `${file:PATH}` makes the loader read PATH whole. A mutated path may name an endless or
// blocking file (/dev/zero, /proc/kcore, a FIFO), which hangs or exhausts memory by design
// rather than by a bug, so inputs whose references name anything but a missing path or a
// small regular file outside /dev, /proc and /sys are rejected (-1: not added to the corpus).
// The check parses the JSON as the loader does and scans references as it does.
//
// The transform chain loads a plugin (dlopen) for a `transforms.<alias>.type` holding a '/'
// (a path) or for any non-built-in type when `plugin.path` is set (transform/plugin_loader.h).
// Loading whatever library a mutated path names is not a test of walrelay, so such configs
// stop before TransformChain::Build; the check runs after substitution, which can produce one.
#include <rapidjson/document.h>
#include <sys/stat.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "config/connector_config.h"
#include "config/relay_settings.h"
#include "transform/chain.h"

namespace {

constexpr off_t kMaxReferencedFileBytes = 64 * 1024;

bool SafeToRead(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return true;  // the loader reports it as unreadable
  if (!S_ISREG(st.st_mode) || st.st_size == 0 || st.st_size > kMaxReferencedFileBytes) return false;
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) return false;
  const std::string_view real(resolved);
  return !(real.starts_with("/dev/") || real.starts_with("/proc/") || real.starts_with("/sys/"));
}

// Mirrors SubstituteConfigValue's scan: "${" up to the next '}'.
bool ReferencesAreSafe(std::string_view value) {
  size_t pos = 0;
  while (true) {
    const size_t start = value.find("${", pos);
    if (start == std::string_view::npos) return true;
    const size_t end = value.find('}', start);
    if (end == std::string_view::npos) return true;
    const std::string_view ref = value.substr(start + 2, end - start - 2);
    if (ref.starts_with("file:") && !SafeToRead(std::string(ref.substr(5)))) return false;
    pos = end + 1;
  }
}

bool InputIsSafe(std::string_view json) {
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseIterativeFlag>(json.data(), json.size());
  if (doc.HasParseError() || !doc.IsObject()) return true;  // nothing gets substituted
  const rapidjson::Value* flat = &doc;
  if (auto it = doc.FindMember("config"); it != doc.MemberEnd()) {
    if (!it->value.IsObject()) return true;
    flat = &it->value;
  }
  for (const auto& m : flat->GetObject()) {
    if (m.value.IsString() &&
        !ReferencesAreSafe(std::string_view(m.value.GetString(), m.value.GetStringLength())))
      return false;
  }
  return true;
}

bool MayLoadPlugin(const walrelay::Properties& properties) {
  for (const auto& [key, value] : properties.values()) {
    if (key == "plugin.path") return true;
    if (key.starts_with("transforms.") && key.ends_with(".type") &&
        value.find('/') != std::string::npos)
      return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The seed corpus refers to this variable, so the ${env:} success path is reachable.
  ::setenv("WALRELAY_FUZZ_PG_PASSWORD", "fuzz-password", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  if (!InputIsSafe(json)) return -1;
  auto config = walrelay::ParseConnectorConfig(json, "fuzz input");
  if (!config.ok()) return 0;
  auto settings = walrelay::ParseRelaySettings(*config);
  if (!settings.ok()) return 0;
  // What the relay asks of the settings before streaming. IncludesTable() is left out: it
  // runs std::regex's backtracking matcher, whose time on a pattern such as `a**********b`
  // grows exponentially (libstdc++'s, as Java's on `(a*)*b`), which is the library's nature
  // and would only make the run time out.
  (void)settings->Wal2JsonAddTables();
  if (MayLoadPlugin(settings->properties)) return 0;
  auto chain = walrelay::TransformChain::Build(
      settings->properties, {settings->topic_prefix, settings->dbname, settings->name});
  (void)chain.ok();
  (void)settings->properties.UnreadKeys();
  return 0;
}
