#include "status/metrics.h"

#include <spdlog/fmt/fmt.h>

namespace walrelay {

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void PrometheusText::Family(std::string_view name, std::string_view type, std::string_view help) {
  family_ = std::string(name);
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void PrometheusText::SampleName(const Labels& labels) {
  out_ += family_;
  if (labels.empty()) return;
  out_ += '{';
  bool first = true;
  for (const auto& [key, value] : labels) {
    if (!first) out_ += ',';
    first = false;
    out_ += key + "=\"" + EscapeLabelValue(value) + '"';
  }
  out_ += '}';
}

void PrometheusText::Sample(const Labels& labels, uint64_t value) {
  SampleName(labels);
  out_ += fmt::format(" {}\n", value);
}

void PrometheusText::Sample(const Labels& labels, double value) {
  SampleName(labels);
  out_ += fmt::format(" {:.3f}\n", value);
}

void PrometheusText::Single(std::string_view name, std::string_view type, std::string_view help,
                            uint64_t value) {
  Family(name, type, help);
  Sample({}, value);
}

void PrometheusText::Single(std::string_view name, std::string_view type, std::string_view help,
                            double value) {
  Family(name, type, help);
  Sample({}, value);
}

void PrometheusText::PerLabel(std::string_view name, std::string_view type, std::string_view help,
                              std::string_view label, const std::map<std::string, uint64_t>& values,
                              const std::vector<std::string>& known) {
  Family(name, type, help);
  std::map<std::string, uint64_t> all = values;
  for (const auto& key : known) all.try_emplace(key, 0);
  for (const auto& [key, value] : all) Sample({{std::string(label), key}}, value);
}

}  // namespace walrelay
