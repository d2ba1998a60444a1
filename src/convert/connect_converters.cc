#include "convert/connect_converters.h"

#include <rapidjson/document.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <map>

#include "convert/java_text.h"
#include "transform/change_event_source.h"  // Base64

namespace walrelay {
namespace {

constexpr const char* kDecimalName = "org.apache.kafka.connect.data.Decimal";

const char* ConnectTypeName(ConnectType type) {
  switch (type) {
    case ConnectType::kString: return "STRING";
    case ConnectType::kBytes: return "BYTES";
    case ConnectType::kInt8: return "INT8";
    case ConnectType::kInt16: return "INT16";
    case ConnectType::kInt32: return "INT32";
    case ConnectType::kInt64: return "INT64";
    case ConnectType::kFloat32: return "FLOAT32";
    case ConnectType::kFloat64: return "FLOAT64";
    case ConnectType::kBoolean: return "BOOLEAN";
    case ConnectType::kStruct: return "STRUCT";
    case ConnectType::kArray: return "ARRAY";
    case ConnectType::kMap: return "MAP";
  }
  return "?";
}

// The Java class Kafka Connect holds such a value in, as its error messages name it.
std::string JavaClassOf(const ConnectShape& shape) {
  switch (shape.type) {
    case ConnectType::kString: return "class java.lang.String";
    case ConnectType::kBytes:
      return SchemaName(shape.schema_json) == kDecimalName ? "class java.math.BigDecimal"
                                                           : "class [B";
    case ConnectType::kInt8: return "class java.lang.Byte";
    case ConnectType::kInt16: return "class java.lang.Short";
    case ConnectType::kInt32: return "class java.lang.Integer";
    case ConnectType::kInt64: return "class java.lang.Long";
    case ConnectType::kFloat32: return "class java.lang.Float";
    case ConnectType::kFloat64: return "class java.lang.Double";
    case ConnectType::kBoolean: return "class java.lang.Boolean";
    case ConnectType::kStruct: return "class org.apache.kafka.connect.data.Struct";
    case ConnectType::kArray: return "class java.util.ArrayList";
    case ConnectType::kMap: return "class java.util.HashMap";
  }
  return "?";
}

// Connect's Date, Time and Timestamp, which Java holds as java.util.Date.
bool IsConnectTemporal(const ConnectShape& shape) {
  if (shape.type != ConnectType::kInt32 && shape.type != ConnectType::kInt64) return false;
  const std::string name = SchemaName(shape.schema_json);
  return name == "org.apache.kafka.connect.data.Date" ||
         name == "org.apache.kafka.connect.data.Time" ||
         name == "org.apache.kafka.connect.data.Timestamp";
}

Result<std::optional<std::string>> DateText(const ConnectShape& shape, const std::string& value,
                                            bool to_string) {
  auto text = JavaDateText(SchemaName(shape.schema_json), value, to_string);
  if (!text) return Status::Transform("'" + value + "' is not a Connect date or time");
  return text;
}

bool IsDecimal(const ConnectShape& shape) {
  return shape.type == ConnectType::kBytes && SchemaName(shape.schema_json) == kDecimalName;
}

Result<std::optional<std::string>> DecimalText(const ConnectShape& shape,
                                               const std::string& unscaled) {
  auto scale = DecimalScale(shape.schema_json);
  if (!scale)
    return Status::Transform("a Decimal schema without a scale parameter: " +
                             shape.schema_json.str());
  return std::optional<std::string>(JavaDecimalText(unscaled, *scale));
}

Result<std::optional<std::string>> FloatingText(const ConnectShape& shape, const std::string& text,
                                                bool keep) {
  if (keep) return std::optional<std::string>(text);
  auto java = shape.type == ConnectType::kFloat32 ? JavaFloatText(text) : JavaDoubleText(text);
  if (!java) return Status::Transform("'" + text + "' is not a number");
  return java;
}

// The schema's "optional" flag; a schema that does not say is optional.
bool IsOptional(const std::string& schema_json) {
  rapidjson::Document d;
  d.Parse(schema_json.data(), schema_json.size());
  if (d.HasParseError() || !d.IsObject() || !d.HasMember("optional") || !d["optional"].IsBool())
    return true;
  return d["optional"].GetBool();
}

// Standard base64 (Connect's JSON for bytes) to bytes; nullopt when it is not base64.
std::optional<std::string> FromBase64(std::string_view text) {
  std::string out;
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : text) {
    int v = -1;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+') v = 62;
    else if (c == '/') v = 63;
    else if (c == '=') break;
    if (v < 0) return std::nullopt;
    buffer = buffer << 6 | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xff));
    }
  }
  return out;
}

// The scale of each Decimal field of a struct schema, by field name.
std::map<std::string, int32_t> DecimalFields(const std::string& struct_schema) {
  std::map<std::string, int32_t> out;
  rapidjson::Document d;
  d.Parse(struct_schema.data(), struct_schema.size());
  if (d.HasParseError() || !d.IsObject() || !d.HasMember("fields") || !d["fields"].IsArray())
    return out;
  for (const auto& f : d["fields"].GetArray()) {
    if (!f.IsObject() || !f.HasMember("field") || !f["field"].IsString()) continue;
    rapidjson::StringBuffer one;
    rapidjson::Writer<rapidjson::StringBuffer> w(one);
    f.Accept(w);
    if (SchemaName(one.GetString()) != kDecimalName) continue;
    if (auto scale = DecimalScale(one.GetString())) out[f["field"].GetString()] = *scale;
  }
  return out;
}

// Copies a struct's JSON, writing the members named in `decimals` (base64 unscaled bytes, as
// the value carries a Decimal) as the BigDecimal text Java holds: Struct.toString prints a
// Decimal member as BigDecimal.toString(), not as its bytes.
class DecimalMembersAsNumbers
    : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, DecimalMembersAsNumbers> {
 public:
  explicit DecimalMembersAsNumbers(const std::map<std::string, int32_t>& decimals)
      : decimals_(decimals), writer_(out_) {}

  bool Null() { return Plain(), writer_.Null(); }
  bool Bool(bool b) { return Plain(), writer_.Bool(b); }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool) {
    Plain();
    return writer_.RawValue(s, n, rapidjson::kNumberType);
  }
  bool String(const char* s, rapidjson::SizeType n, bool) {
    if (scale_) {
      auto bytes = FromBase64(std::string_view(s, n));
      const int32_t scale = *scale_;
      scale_.reset();
      if (bytes) {
        const std::string text = JavaDecimalText(*bytes, scale);
        return writer_.RawValue(text.data(), text.size(), rapidjson::kNumberType);
      }
    }
    return writer_.String(s, n);
  }
  bool StartObject() { return Open(), writer_.StartObject(); }
  bool Key(const char* s, rapidjson::SizeType n, bool) {
    if (depth_ == 1) {
      auto it = decimals_.find(std::string(s, n));
      if (it != decimals_.end()) scale_ = it->second;
    }
    return writer_.Key(s, n);
  }
  bool EndObject(rapidjson::SizeType n) { return --depth_, writer_.EndObject(n); }
  bool StartArray() { return Open(), writer_.StartArray(); }
  bool EndArray(rapidjson::SizeType n) { return --depth_, writer_.EndArray(n); }

  std::string text() const { return std::string(out_.GetString(), out_.GetSize()); }

 private:
  void Plain() { scale_.reset(); }
  void Open() {
    scale_.reset();
    ++depth_;
  }

  const std::map<std::string, int32_t>& decimals_;
  rapidjson::StringBuffer out_;
  rapidjson::Writer<rapidjson::StringBuffer> writer_;
  std::optional<int32_t> scale_;  // set between a Decimal member's key and its value
  int depth_ = 0;
};

// A struct's JSON with its Decimal members as numbers, for Struct.toString.
Result<std::string> WithDecimalText(const ConnectShape& shape, const std::string& json) {
  const auto decimals = DecimalFields(shape.schema_json);
  if (decimals.empty()) return json;
  DecimalMembersAsNumbers handler(decimals);
  rapidjson::Reader reader;
  rapidjson::MemoryStream stream(json.data(), json.size());
  constexpr unsigned kFlags =
      rapidjson::kParseNumbersAsStringsFlag | rapidjson::kParseIterativeFlag;
  if (!reader.Parse<kFlags>(stream, handler)) {
    return Status::Internal("a structured value is not valid JSON");
  }
  return handler.text();
}

class NativeConverter final : public Converter {
 public:
  Result<std::optional<std::string>> FromConnectData(
      const std::string&, const ConnectShape&,
      const std::optional<std::string>& value) const override {
    return value;
  }
};

// StringConverter: serializer.serialize(value.toString()).
class StringConverter final : public Converter {
 public:
  Result<std::optional<std::string>> FromConnectData(
      const std::string&, const ConnectShape& shape,
      const std::optional<std::string>& value) const override {
    if (!value) return std::optional<std::string>();
    switch (shape.type) {
      case ConnectType::kBytes: {
        if (IsDecimal(shape)) return DecimalText(shape, *value);
        // Bytes nobody knows the schema of (a plugin's) have no Java rendering to copy
        // (a byte[] prints its identity hash): they pass as they are.
        if (shape.schema_json.empty()) return value;
        // Debezium hands binary columns to Connect as a ByteBuffer, whose toString is this.
        const std::string n = std::to_string(value->size());
        return std::optional<std::string>("java.nio.HeapByteBuffer[pos=0 lim=" + n + " cap=" + n +
                                          "]");
      }
      case ConnectType::kFloat32:
      case ConnectType::kFloat64: return FloatingText(shape, *value, keep_number_text_);
      case ConnectType::kStruct: {
        auto json = WithDecimalText(shape, *value);
        if (!json.ok()) return json.status();
        auto text = JavaObjectText(*json, false);
        if (!text.ok()) return text.status();
        return std::optional<std::string>(std::move(text).value());
      }
      case ConnectType::kArray:
      case ConnectType::kMap: {
        auto text = JavaObjectText(*value, shape.type == ConnectType::kMap);
        if (!text.ok()) return text.status();
        return std::optional<std::string>(std::move(text).value());
      }
      default:
        if (IsConnectTemporal(shape)) return DateText(shape, *value, true);
        return value;
    }
  }
};

class JsonConverter final : public Converter {
 public:
  explicit JsonConverter(bool schemas) : schemas_(schemas) {}

  bool WritesSchemas() const override { return schemas_; }

  Result<std::optional<std::string>> FromConnectData(
      const std::string&, const ConnectShape& shape,
      const std::optional<std::string>& value) const override {
    // A null without a schema is a Kafka null (a tombstone); with a schema it is JSON null.
    if (shape.schema_json.empty() && !value) return std::optional<std::string>();
    auto payload = Payload(shape, value);
    if (!payload.ok()) return payload.status();
    if (!schemas_) return std::optional<std::string>(std::move(payload).value());
    const std::string schema =
        shape.schema_json.empty() ? "null" : EscapeOutsideBmp(shape.schema_json);
    return std::optional<std::string>("{\"schema\":" + schema + ",\"payload\":" + *payload + "}");
  }

 private:
  Result<std::string> Payload(const ConnectShape& shape,
                              const std::optional<std::string>& value) const {
    if (!value) {
      if (!shape.schema_json.empty() && !IsOptional(shape.schema_json))
        return Status::Transform(
            "Conversion error: null value for field that is required and has no default value");
      return std::string("null");
    }
    switch (shape.type) {
      case ConnectType::kString: return JacksonStringLiteral(*value);
      case ConnectType::kBytes:
        // decimal.format=BASE64: a Decimal is its unscaled bytes, like any other bytes.
        return "\"" + Base64(*value) + "\"";
      case ConnectType::kFloat32:
      case ConnectType::kFloat64: {
        if (keep_number_text_) {
          const bool special = *value == "NaN" || *value == "Infinity" || *value == "-Infinity";
          return special ? "\"" + *value + "\"" : *value;
        }
        auto json = JacksonDoubleJson(*value, shape.type == ConnectType::kFloat32);
        if (!json) return Status::Transform("'" + *value + "' is not a number");
        return std::move(*json);
      }
      case ConnectType::kStruct:
      case ConnectType::kArray:
      case ConnectType::kMap: return EscapeOutsideBmp(*value);
      default: return *value;  // integers and booleans: their text is their JSON
    }
  }

  bool schemas_;
};

class ByteArrayConverter final : public Converter {
 public:
  Result<std::optional<std::string>> FromConnectData(
      const std::string&, const ConnectShape& shape,
      const std::optional<std::string>& value) const override {
    if (!shape.schema_json.empty() && shape.type != ConnectType::kBytes)
      return Status::Transform(std::string("Invalid schema type for ByteArrayConverter: ") +
                               ConnectTypeName(shape.type));
    if (value && (shape.type != ConnectType::kBytes || IsDecimal(shape)))
      return Status::Transform("ByteArrayConverter is not compatible with objects of type " +
                               JavaClassOf(shape));
    return value;
  }
};

class BinaryDataConverter final : public Converter {
 public:
  explicit BinaryDataConverter(std::unique_ptr<Converter> delegate)
      : delegate_(std::move(delegate)) {}

  bool WritesSchemas() const override { return delegate_ && delegate_->WritesSchemas(); }
  void KeepNumberText(bool keep) override {
    if (delegate_) delegate_->KeepNumberText(keep);
  }

  Result<std::optional<std::string>> FromConnectData(
      const std::string& topic, const ConnectShape& shape,
      const std::optional<std::string>& value) const override {
    const bool bytes = shape.type == ConnectType::kBytes && !IsDecimal(shape);
    const bool schema_not_bytes = !shape.schema_json.empty() && shape.type != ConnectType::kBytes;
    if (!schema_not_bytes && (bytes || !value)) return value;
    if (!delegate_) {
      return Status::Transform(
          std::string("BinaryDataConverter writes only bytes; a value of Connect type ") +
          ConnectTypeName(shape.type) + " requires a delegate.converter.type to be configured");
    }
    return delegate_->FromConnectData(topic, shape, value);
  }

 private:
  std::unique_ptr<Converter> delegate_;
};

// SimpleHeaderConverter: Values.convertToString(schema, value) in UTF-8.
class SimpleHeaderConverter final : public Converter {
 public:
  Result<std::optional<std::string>> FromConnectData(
      const std::string&, const ConnectShape& shape,
      const std::optional<std::string>& value) const override {
    if (!value) return std::optional<std::string>();
    switch (shape.type) {
      case ConnectType::kBytes:
        if (IsDecimal(shape)) return DecimalText(shape, *value);
        return std::optional<std::string>(Base64(*value));
      case ConnectType::kFloat32:
      case ConnectType::kFloat64: return FloatingText(shape, *value, keep_number_text_);
      case ConnectType::kStruct:
      case ConnectType::kArray:
      case ConnectType::kMap: {
        auto text = ConnectValuesText(*value);
        if (!text.ok()) return text.status();
        return std::optional<std::string>(std::move(text).value());
      }
      default:
        if (IsConnectTemporal(shape)) return DateText(shape, *value, false);
        return value;
    }
  }
};

Status CheckUtf8Encoding(const Properties& settings) {
  auto encoding = settings.Get("converter.encoding");
  if (!encoding) return Status::Ok();
  const std::string e = ToLower(Trim(*encoding));
  if (e == "utf-8" || e == "utf8") return Status::Ok();
  return Status::Config("'" + settings.FullKey("converter.encoding") + "' is '" + *encoding +
                        "'; walrelay writes strings in UTF-8 only");
}

}  // namespace

std::unique_ptr<Converter> MakeNativeConverter() { return std::make_unique<NativeConverter>(); }

Result<std::unique_ptr<Converter>> MakeConverter(const std::string& class_name,
                                                 const std::string& class_key,
                                                 const Properties& settings) {
  const std::string name = Trim(class_name);
  if (name == kStringConverterClass) {
    if (auto st = CheckUtf8Encoding(settings); !st.ok()) return st;
    return std::unique_ptr<Converter>(std::make_unique<StringConverter>());
  }
  if (name == kJsonConverterClass) {
    auto schemas = settings.GetBool("schemas.enable", true);
    if (!schemas.ok()) return schemas.status();
    auto format = settings.GetEnum("decimal.format", "BASE64", {"BASE64", "NUMERIC"});
    if (!format.ok()) return format.status();
    if (*format != "BASE64") {
      return Status::Config(
          "'" + settings.FullKey("decimal.format") +
          "' is NUMERIC; walrelay's JsonConverter writes decimals as BASE64 only");
    }
    auto cache = settings.GetInt("schemas.cache.size", 1000, 0, INT32_MAX);  // no cache to size
    if (!cache.ok()) return cache.status();
    auto replace = settings.GetBool("replace.null.with.default", true);  // no defaults to apply
    if (!replace.ok()) return replace.status();
    return std::unique_ptr<Converter>(std::make_unique<JsonConverter>(*schemas));
  }
  if (name == kByteArrayConverterClass) {
    return std::unique_ptr<Converter>(std::make_unique<ByteArrayConverter>());
  }
  if (name == kBinaryDataConverterClass) {
    std::unique_ptr<Converter> delegate;
    if (auto type = settings.Get("delegate.converter.type")) {
      auto made = MakeConverter(*type, settings.FullKey("delegate.converter.type"),
                                settings.Scoped("delegate.converter.type."));
      if (!made.ok()) return made.status();
      delegate = std::move(made).value();
    }
    return std::unique_ptr<Converter>(std::make_unique<BinaryDataConverter>(std::move(delegate)));
  }
  if (name == kSimpleHeaderConverterClass) {
    return std::unique_ptr<Converter>(std::make_unique<SimpleHeaderConverter>());
  }
  return Status::Config("'" + class_key + "' is '" + class_name +
                        "', which walrelay does not implement; use one of " +
                        kStringConverterClass + ", " + kJsonConverterClass + ", " +
                        kByteArrayConverterClass + ", " + kBinaryDataConverterClass + ", " +
                        kSimpleHeaderConverterClass);
}

}  // namespace walrelay
