#include "transform/plugin_transform.h"

#include <spdlog/spdlog.h>

#include <array>
#include <chrono>
#include <cstring>
#include <optional>

// The host's side of one instance (opaque to plugins): what log lines are prefixed with.
struct walrelay_host {
  std::string alias;
  std::string plugin;
};

extern "C" {
// C linkage: plugins call it through a C function pointer. Never lets an exception out.
static void WalrelayHostLog(walrelay_host* host, int32_t level, const char* message) {
  if (host == nullptr || message == nullptr) return;
  spdlog::level::level_enum spd_level = spdlog::level::info;
  switch (level) {
    case WALRELAY_LOG_DEBUG: spd_level = spdlog::level::debug; break;
    case WALRELAY_LOG_INFO: spd_level = spdlog::level::info; break;
    case WALRELAY_LOG_WARN: spd_level = spdlog::level::warn; break;
    case WALRELAY_LOG_ERROR: spd_level = spdlog::level::err; break;
    default: break;
  }
  try {
    spdlog::log(spd_level, "transform '{}' ({}): {}", host->alias, host->plugin, message);
  } catch (...) {
  }
}
}  // extern "C"

namespace walrelay {
namespace {

constexpr walrelay_host_api kHostApi = {sizeof(walrelay_host_api), WALRELAY_TRANSFORM_ABI_VERSION,
                                        &WalrelayHostLog};

// Larger than WALRELAY_ERROR_SIZE_MIN so plugins rarely need to truncate.
constexpr size_t kErrorBufferSize = 1024;

walrelay_bytes View(const std::string& s) { return {s.data(), s.size()}; }
walrelay_bytes View(const std::optional<std::string>& s) {
  return s ? View(*s) : walrelay_bytes{nullptr, 0};
}
std::optional<std::string> Copy(walrelay_bytes b) {
  if (b.data == nullptr) return std::nullopt;
  return std::string(b.data, b.size);
}
bool SameBytes(walrelay_bytes a, walrelay_bytes b) { return a.data == b.data && a.size == b.size; }

int64_t NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "table public.outbox, event id 'x', LSN 0/16B3748"
std::string Origin(const Record& record) {
  std::string where = DescribeOrigin(record.source);
  if (const Header* id = record.FindHeader("id"); id != nullptr && id->value) {
    where += ", event id '" + *id->value + "'";
  }
  return where + ", LSN " + record.source.lsn.ToString();
}

// The fields of an output record, copied out of the plugin's memory. The outer nullopt means
// "unchanged"; an inner nullopt is a null key or value.
struct Output {
  std::optional<std::string> topic;
  std::optional<std::optional<std::string>> key, value;
  std::optional<std::vector<Header>> headers;
  int32_t partition = kAnyPartition;
  int64_t timestamp_ms = 0;
};

class PluginTransform final : public Transform {
 public:
  PluginTransform(std::string alias, std::shared_ptr<const PluginLibrary> library,
                  const SourceContext& context)
      : alias_(std::move(alias)),
        library_(std::move(library)),
        host_(std::make_unique<walrelay_host>(walrelay_host{alias_, library_->name()})),
        context_(context) {}

  PluginTransform(const PluginTransform&) = delete;
  PluginTransform& operator=(const PluginTransform&) = delete;

  ~PluginTransform() override {
    if (created_) library_->api().destroy(instance_);
  }

  const std::string& alias() const override { return alias_; }

  Status Create(const std::vector<std::pair<std::string, std::string>>& config) {
    std::vector<walrelay_config_entry> entries;
    entries.reserve(config.size());
    for (const auto& [key, value] : config) entries.push_back({key.c_str(), value.c_str()});
    const walrelay_create_args args = {sizeof(walrelay_create_args),
                                       &kHostApi,
                                       host_.get(),
                                       context_.connector_name.c_str(),
                                       alias_.c_str(),
                                       entries.data(),
                                       entries.size()};
    error_[0] = '\0';
    void* instance = nullptr;
    const int rc = library_->api().create(&args, &instance, error_.data(), error_.size());
    if (rc != WALRELAY_OK) {
      return Status::Config("transform '" + alias_ + "': " + library_->Describe() +
                            " failed to start: " + ErrorText());
    }
    instance_ = instance;
    created_ = true;
    return Status::Ok();
  }

  Result<TransformOutcome> Apply(Record& record) override {
    if (record.change != nullptr) {
      // Plugins see bytes only: the value a consumer would get without transforms.
      if (!record.source.tombstone)
        record.value = SerializeChangeEvent(*record.change, context_, NowMillis());
      record.value_shape = ConnectShape{ConnectType::kStruct, ""};
      record.change = nullptr;
    }
    const walrelay_source source = {
        sizeof(walrelay_source),      static_cast<int32_t>(record.source.op),
        record.source.lsn.value(),    View(record.source.table),
        record.source.commit_time_ms, record.source.xid};
    header_views_.clear();
    for (const auto& h : record.headers) header_views_.push_back({View(h.key), View(h.value)});
    const walrelay_record in = {sizeof(walrelay_record), record.partition,    View(record.topic),
                                View(record.key),        View(record.value),  header_views_.data(),
                                header_views_.size(),    record.timestamp_ms, &source};
    walrelay_record out = in;
    error_[0] = '\0';
    const int rc = library_->api().apply(instance_, &in, &out, error_.data(), error_.size());
    switch (rc) {
      case WALRELAY_OK: {
        auto output = CopyOutput(in, out, record);
        if (!output.ok()) return output.status();
        Store(std::move(output).value(), record);
        return TransformOutcome::kKeep;
      }
      case WALRELAY_DROP: return TransformOutcome::kDrop;
      case WALRELAY_ERROR: return Failure(record, "failed the record: " + ErrorText());
      default:
        return Failure(record, "returned unknown status " + std::to_string(rc) +
                                   " (treated as a failure): " + ErrorText());
    }
  }

 private:
  std::string ErrorText() {
    error_.back() = '\0';  // a plugin that filled the buffer may have left no terminator
    const std::string text(error_.data());
    return text.empty() ? "(no message)" : text;
  }

  Status Failure(const Record& record, const std::string& what) const {
    return Status::Transform(library_->Describe() + " " + what + " (" + Origin(record) + ")");
  }

  // Checks the output and copies every changed field before the record is touched: an output
  // field may point into the record's own strings (e.g. key and value swapped).
  Result<Output> CopyOutput(const walrelay_record& in, const walrelay_record& out,
                            const Record& record) const {
    if (out.topic.data == nullptr || out.topic.size == 0) {
      return Failure(record, "set an empty topic");
    }
    if (out.partition < WALRELAY_PARTITION_ANY) {
      return Failure(record, "set partition " + std::to_string(out.partition));
    }
    if (out.header_count > 0 && out.headers == nullptr) {
      return Failure(record, "set " + std::to_string(out.header_count) + " headers but no array");
    }
    Output output;
    output.partition = out.partition;
    output.timestamp_ms = out.timestamp_ms;
    if (!SameBytes(out.topic, in.topic)) output.topic.emplace(out.topic.data, out.topic.size);
    if (!SameBytes(out.key, in.key)) output.key.emplace(Copy(out.key));
    if (!SameBytes(out.value, in.value)) output.value.emplace(Copy(out.value));
    if (out.headers != in.headers || out.header_count != in.header_count) {
      std::vector<Header> headers;
      headers.reserve(out.header_count);
      for (size_t i = 0; i < out.header_count; ++i) {
        const walrelay_header& h = out.headers[i];
        if (h.key.data == nullptr) return Failure(record, "set a header without a name");
        headers.push_back(Header{std::string(h.key.data, h.key.size), Copy(h.value)});
      }
      output.headers = std::move(headers);
    }
    return output;
  }

  // What a plugin sets is bytes to Connect: key and value become BYTES without a schema
  // (docs/plugins.md); a header it adds is a string, a header it keeps keeps its shape.
  static void Store(Output output, Record& record) {
    if (output.topic) record.topic = std::move(*output.topic);
    if (output.key) {
      record.key = std::move(*output.key);
      record.key_shape = ConnectShape{ConnectType::kBytes, ""};
    }
    if (output.value) {
      record.value = std::move(*output.value);
      record.value_shape = ConnectShape{ConnectType::kBytes, ""};
      record.message = nullptr;  // the value no longer is the message event
    }
    if (output.headers) {
      for (size_t i = 0; i < output.headers->size() && i < record.headers.size(); ++i) {
        Header& h = (*output.headers)[i];
        if (h.key == record.headers[i].key && h.value == record.headers[i].value)
          h.shape = record.headers[i].shape;
      }
      record.headers = std::move(*output.headers);
    }
    record.partition = output.partition;
    record.timestamp_ms = output.timestamp_ms;
  }

  // Declared in destruction order, last first: the instance is destroyed (in the destructor)
  // while host_ is alive, since destroy() may log, and library_ goes last since it unloads
  // the code.
  const std::string alias_;
  const std::shared_ptr<const PluginLibrary> library_;
  const std::unique_ptr<walrelay_host> host_;
  const SourceContext context_;
  void* instance_ = nullptr;
  bool created_ = false;
  std::vector<walrelay_header> header_views_;  // reused for every record
  std::array<char, kErrorBufferSize> error_{};
};

}  // namespace

Result<std::unique_ptr<Transform>> MakePluginTransform(
    const std::string& alias, std::shared_ptr<const PluginLibrary> library,
    const std::vector<std::pair<std::string, std::string>>& config, const SourceContext& context) {
  auto transform = std::make_unique<PluginTransform>(alias, std::move(library), context);
  WALRELAY_RETURN_IF_ERROR(transform->Create(config));
  return std::unique_ptr<Transform>(std::move(transform));
}

}  // namespace walrelay
