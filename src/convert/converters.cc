#include "convert/converters.h"

#include "convert/connect_converters.h"

namespace walrelay {

Result<Converters> Converters::Build(const Properties& config) {
  Part parts[3];
  const char* keys[3] = {kKeyConverter, kValueConverter, kHeaderConverter};
  for (int i = 0; i < 3; ++i) {
    auto class_name = config.Get(keys[i]);
    if (!class_name) {
      parts[i] = Part{MakeNativeConverter(), ""};
      continue;
    }
    auto made = MakeConverter(*class_name, config.FullKey(keys[i]),
                              config.Scoped(std::string(keys[i]) + "."));
    if (!made.ok()) return made.status();
    parts[i] = Part{std::move(made).value(), Trim(*class_name)};
  }
  const bool native =
      parts[0].class_name.empty() && parts[1].class_name.empty() && parts[2].class_name.empty();
  return Converters(std::move(parts[0]), std::move(parts[1]), std::move(parts[2]), native);
}

Converters Converters::Native() {
  return Converters(Part{MakeNativeConverter(), ""}, Part{MakeNativeConverter(), ""},
                    Part{MakeNativeConverter(), ""}, true);
}

bool Converters::WritesSchemas() const {
  return key_.converter->WritesSchemas() || value_.converter->WritesSchemas() ||
         header_.converter->WritesSchemas();
}

void Converters::KeepNumberText(bool keep) {
  for (Part* part : {&key_, &value_, &header_}) part->converter->KeepNumberText(keep);
}

std::optional<ConversionFailure> Converters::Apply(Record& record) const {
  if (native_) return std::nullopt;
  auto fail = [&](const char* stage, const char* converter_key, const Part& part,
                  const std::string& what, const Status& why) {
    return ConversionFailure{
        stage, part.class_name,
        Status::Transform("'" + std::string(converter_key) + "' (" + part.class_name +
                          ") cannot write the " + what + " of a record for topic '" + record.topic +
                          "' (" + DescribeOrigin(record.source) + ", LSN " +
                          record.source.lsn.ToString() + "): " + why.message())};
  };
  auto key = key_.converter->FromConnectData(record.topic, record.key_shape, record.key);
  if (!key.ok()) return fail("KEY_CONVERTER", kKeyConverter, key_, "key", key.status());
  auto value = value_.converter->FromConnectData(record.topic, record.value_shape, record.value);
  if (!value.ok()) return fail("VALUE_CONVERTER", kValueConverter, value_, "value", value.status());
  std::vector<std::optional<std::string>> headers;
  headers.reserve(record.headers.size());
  for (const Header& h : record.headers) {
    auto converted = header_.converter->FromConnectData(record.topic, h.shape, h.value);
    if (!converted.ok()) {
      return fail("HEADER_CONVERTER", kHeaderConverter, header_, "header '" + h.key + "'",
                  converted.status());
    }
    headers.push_back(std::move(converted).value());
  }
  record.key = std::move(key).value();
  record.value = std::move(value).value();
  for (size_t i = 0; i < headers.size(); ++i) record.headers[i].value = std::move(headers[i]);
  return std::nullopt;
}

}  // namespace walrelay
