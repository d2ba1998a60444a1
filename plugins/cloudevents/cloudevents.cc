// cloudevents: wraps each record as a CloudEvents 1.0 event, in the structured or binary
// content mode of the CloudEvents Kafka protocol binding. README.md lists the keys.
//
// The event's attributes come from the record: `id` from the `id` header (the outbox event id
// the event router sets), `type` from the header named by `type.header`, `subject` from the
// key, `time` from the timestamp (the commit time); `source` is configured. The value must be
// JSON, since the event declares datacontenttype application/json. Tombstones pass unchanged:
// wrapping one would hide the delete from log compaction.
#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

#include <ctime>
#include <vector>

#include "json_writer.h"
#include "plugin_support.h"

namespace {

using walrelay_plugin::AsBytes;
using walrelay_plugin::AsView;
using walrelay_plugin::FindHeader;

constexpr std::string_view kStructuredContentType = "application/cloudevents+json; charset=UTF-8";
constexpr std::string_view kDataContentType = "application/json";

// "2023-11-14T22:13:20.123Z": RFC 3339 in UTC with milliseconds.
std::string Rfc3339(int64_t ms) {
  int64_t seconds = ms / 1000;
  int64_t millis = ms % 1000;
  if (millis < 0) millis += 1000, seconds -= 1;  // floor, for times before 1970
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[96];  // room for any int the compiler can imagine in each field
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(millis));
  return buf;
}

class CloudEvents {
 public:
  static std::unique_ptr<CloudEvents> Create(const walrelay_create_args& args, std::string& error) {
    walrelay_plugin::Config config(args);
    auto plugin = std::make_unique<CloudEvents>();
    const std::string mode = walrelay_plugin::ToLower(config.Take("mode", "structured"));
    if (mode != "structured" && mode != "binary") {
      error = "'mode' must be structured or binary, got '" + mode + "'";
      return nullptr;
    }
    plugin->binary_ = mode == "binary";
    plugin->type_header_ = config.Take("type.header", "eventType");
    plugin->source_ = config.Take("source", std::string("/walrelay/") + args.connector_name);
    if (plugin->type_header_.empty() || plugin->source_.empty()) {
      error = "'type.header' and 'source' must not be empty";
      return nullptr;
    }
    error = config.Leftover("mode, type.header, source");
    return error.empty() ? std::move(plugin) : nullptr;
  }

  walrelay_status Apply(const walrelay_record& in, walrelay_record& out, std::string& error) {
    if (in.value.data == nullptr) return WALRELAY_OK;
    const walrelay_header* id = FindHeader(in, "id");
    if (id == nullptr || id->value.data == nullptr) {
      error = "the record has no 'id' header, and a CloudEvent needs an id";
      return WALRELAY_ERROR;
    }
    const walrelay_header* type = FindHeader(in, type_header_);
    if (type == nullptr || type->value.data == nullptr) {
      error = "the record has no '" + type_header_ +
              "' header for the event type (see 'type.header'; the event router adds one with "
              "table.fields.additional.placement=type:header:" +
              type_header_ + ")";
      return WALRELAY_ERROR;
    }
    time_ = Rfc3339(in.timestamp_ms);
    if (binary_) {
      if (!ValidateJson(in.value, error)) return WALRELAY_ERROR;
      std::vector<NamedValue> attributes = {{"ce_specversion", "1.0"},
                                            {"ce_id", AsView(id->value)},
                                            {"ce_source", source_},
                                            {"ce_type", AsView(type->value)}};
      if (in.key.data != nullptr) attributes.push_back({"ce_subject", AsView(in.key)});
      attributes.push_back({"ce_time", time_});
      attributes.push_back({"content-type", kDataContentType});
      SetHeaders(in, out, attributes);
      return WALRELAY_OK;
    }
    if (!WriteStructured(in, AsView(id->value), AsView(type->value), error)) return WALRELAY_ERROR;
    out.value = AsBytes(event_);
    SetHeaders(in, out, {{"content-type", kStructuredContentType}});
    return WALRELAY_OK;
  }

 private:
  using Writer = walrelay_plugin::JsonWriter;
  using NamedValue = std::pair<std::string_view, std::string_view>;
  static constexpr unsigned kParseFlags = rapidjson::kParseNumbersAsStringsFlag |
                                          rapidjson::kParseValidateEncodingFlag |
                                          rapidjson::kParseIterativeFlag;

  // Parses `json` into `handler` (numbers keep their exact digits); false with `error` set
  // when it is not JSON. The message never quotes the value: it may hold personal data.
  template <typename Handler>
  static bool ParseJson(walrelay_bytes json, Handler& handler, std::string& error) {
    rapidjson::Reader reader;
    rapidjson::MemoryStream stream(json.data, json.size);
    const rapidjson::ParseResult ok = reader.Parse<kParseFlags>(stream, handler);
    if (ok) return true;
    error = std::string("the value is not JSON (") + rapidjson::GetParseError_En(ok.Code()) +
            " at offset " + std::to_string(ok.Offset()) +
            "), so it cannot be the data of an application/json event";
    return false;
  }

  static bool ValidateJson(walrelay_bytes json, std::string& error) {
    rapidjson::BaseReaderHandler<> ignore;
    return ParseJson(json, ignore, error);
  }

  bool WriteStructured(const walrelay_record& in, std::string_view id, std::string_view type,
                       std::string& error) {
    rapidjson::StringBuffer buffer;
    Writer writer(buffer);
    writer.StartObject();
    writer.Key("specversion");
    writer.String("1.0");
    writer.Key("id");
    writer.String(id);
    writer.Key("source");
    writer.String(source_);
    writer.Key("type");
    writer.String(type);
    if (in.key.data != nullptr) {
      writer.Key("subject");
      writer.String(AsView(in.key));
    }
    writer.Key("time");
    writer.String(time_);
    writer.Key("datacontenttype");
    writer.String(kDataContentType);
    writer.Key("data");
    if (!ParseJson(in.value, writer, error)) return false;
    writer.EndObject();
    event_.assign(buffer.GetString(), buffer.GetSize());
    return true;
  }

  // out->headers = in's headers without the names being set, then the new ones.
  void SetHeaders(const walrelay_record& in, walrelay_record& out,
                  const std::vector<NamedValue>& added) {
    headers_.clear();
    for (size_t i = 0; i < in.header_count; ++i) {
      bool replaced = false;
      for (const auto& [name, value] : added) replaced |= AsView(in.headers[i].key) == name;
      if (!replaced) headers_.push_back(in.headers[i]);
    }
    for (const auto& [name, value] : added) headers_.push_back({AsBytes(name), AsBytes(value)});
    out.headers = headers_.data();
    out.header_count = headers_.size();
  }

  bool binary_ = false;
  std::string type_header_;
  std::string source_;
  // Output of the last Apply(), which the host copies before calling again.
  std::string event_;
  std::string time_;
  std::vector<walrelay_header> headers_;
};

}  // namespace

WALRELAY_CPP_PLUGIN(CloudEvents, "cloudevents", "1.0.0")
