// mask: replaces or removes named fields of a JSON value, to keep personal data out of Kafka.
// README.md lists the keys.
//
// Fields are dotted paths from the top of the value (`customer.email`); arrays are crossed
// without an index, so `items.email` names the `email` of every object in `items`. The value
// is filtered as a stream (no document is built): numbers keep their exact digits and members
// their order. A value with nothing to mask is passed on byte for byte; one that is not JSON
// fails the record, since it cannot be checked for the fields.
#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

#include <set>
#include <vector>

#include "json_writer.h"
#include "plugin_support.h"

namespace {

using Writer = walrelay_plugin::JsonWriter;

// A RapidJSON SAX handler that copies events to a Writer, leaving out (or replacing) the
// values whose path is one of the masked fields.
class MaskingFilter : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, MaskingFilter> {
 public:
  MaskingFilter(const std::set<std::string, std::less<>>& fields, bool remove,
                const std::string& replacement, Writer& writer)
      : fields_(fields), remove_(remove), replacement_(replacement), writer_(writer) {}

  size_t masked() const { return masked_; }

  bool Null() {
    return Scalar([&] { return writer_.Null(); });
  }
  bool Bool(bool b) {
    return Scalar([&] { return writer_.Bool(b); });
  }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool) {
    return Scalar([&] { return writer_.RawNumber(s, n); });
  }
  bool String(const char* s, rapidjson::SizeType n, bool) {
    return Scalar([&] { return writer_.String(s, n); });
  }
  bool StartObject() {
    return Open([&] { return writer_.StartObject(); });
  }
  bool StartArray() {
    return Open([&] { return writer_.StartArray(); });
  }
  bool EndObject(rapidjson::SizeType) {
    return Close([&] { return writer_.EndObject(); });
  }
  bool EndArray(rapidjson::SizeType) {
    return Close([&] { return writer_.EndArray(); });
  }

  bool Key(const char* s, rapidjson::SizeType n, bool) {
    if (skip_depth_ > 0) return true;
    path_.resize(bases_.back());
    if (!path_.empty()) path_ += '.';
    path_.append(s, n);
    if (fields_.count(path_) == 0) return writer_.Key(s, n);
    ++masked_;
    skip_next_ = true;
    if (remove_) return true;
    return writer_.Key(s, n) && writer_.String(replacement_);
  }

 private:
  template <typename Write>
  bool Scalar(Write write) {
    if (skip_depth_ > 0) return true;
    if (skip_next_) {
      skip_next_ = false;
      return true;
    }
    return write();
  }

  template <typename Write>
  bool Open(Write write) {
    if (skip_depth_ > 0 || skip_next_) {
      skip_next_ = false;
      ++skip_depth_;
      return true;
    }
    // An array's elements share its path; an object's members extend it.
    bases_.push_back(path_.size());
    return write();
  }

  template <typename Write>
  bool Close(Write write) {
    if (skip_depth_ > 0) {
      --skip_depth_;
      return true;
    }
    path_.resize(bases_.back());
    bases_.pop_back();
    return write();
  }

  const std::set<std::string, std::less<>>& fields_;
  const bool remove_;
  const std::string& replacement_;
  Writer& writer_;
  std::string path_;              // dotted path of the current member
  std::vector<size_t> bases_{0};  // length of path_ where each open container began
  bool skip_next_ = false;        // the next value belongs to a masked member
  int skip_depth_ = 0;            // > 0 while inside a masked value
  size_t masked_ = 0;
};

class Mask {
 public:
  static std::unique_ptr<Mask> Create(const walrelay_create_args& args, std::string& error) {
    walrelay_plugin::Config config(args);
    auto plugin = std::make_unique<Mask>();
    const std::string fields = config.Take("fields", "");
    size_t start = 0;
    while (start <= fields.size()) {
      size_t comma = fields.find(',', start);
      if (comma == std::string::npos) comma = fields.size();
      const std::string field = Trim(fields.substr(start, comma - start));
      if (!field.empty()) plugin->fields_.insert(field);
      start = comma + 1;
    }
    if (plugin->fields_.empty()) {
      error = "'fields' must list at least one dotted field path";
      return nullptr;
    }
    const std::string mode = walrelay_plugin::ToLower(config.Take("mode", "replace"));
    if (mode != "replace" && mode != "remove") {
      error = "'mode' must be replace or remove, got '" + mode + "'";
      return nullptr;
    }
    plugin->remove_ = mode == "remove";
    plugin->replacement_ = config.Take("replacement", "****");
    error = config.Leftover("fields, mode, replacement");
    return error.empty() ? std::move(plugin) : nullptr;
  }

  walrelay_status Apply(const walrelay_record& in, walrelay_record& out, std::string& error) {
    if (in.value.data == nullptr) return WALRELAY_OK;
    rapidjson::StringBuffer buffer;
    Writer writer(buffer);
    MaskingFilter filter(fields_, remove_, replacement_, writer);
    rapidjson::Reader reader;
    rapidjson::MemoryStream stream(in.value.data, in.value.size);
    constexpr unsigned kFlags = rapidjson::kParseNumbersAsStringsFlag |
                                rapidjson::kParseValidateEncodingFlag |
                                rapidjson::kParseIterativeFlag;
    const rapidjson::ParseResult ok = reader.Parse<kFlags>(stream, filter);
    if (!ok) {
      // The value is not quoted: it is what this plugin exists to keep out of logs.
      error = std::string("the value is not JSON (") + rapidjson::GetParseError_En(ok.Code()) +
              " at offset " + std::to_string(ok.Offset()) + "), so its fields cannot be masked";
      return WALRELAY_ERROR;
    }
    if (filter.masked() == 0) return WALRELAY_OK;
    value_.assign(buffer.GetString(), buffer.GetSize());
    out.value = walrelay_plugin::AsBytes(value_);
    return WALRELAY_OK;
  }

 private:
  static std::string Trim(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
  }

  std::set<std::string, std::less<>> fields_;
  bool remove_ = false;
  std::string replacement_;
  std::string value_;  // output of the last Apply(); the host copies it before the next call
};

}  // namespace

WALRELAY_CPP_PLUGIN(Mask, "mask", "1.0.0")
