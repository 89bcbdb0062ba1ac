#include "metrics/prometheus.h"

#include <cstdio>

namespace uma::prom {

void family(std::string& out, std::string_view name, std::string_view help, Type type) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += type == Type::kCounter ? " counter\n" : type == Type::kGauge ? " gauge\n" : " histogram\n";
}

namespace {

void sample_text(std::string& out, std::string_view name, std::string_view labels, const char* value) {
  out += name;
  if (!labels.empty()) {
    out += '{';
    out += labels;
    out += '}';
  }
  out += ' ';
  out += value;
  out += '\n';
}

}  // namespace

std::string label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (const char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void sample(std::string& out, std::string_view name, std::string_view labels, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", value);
  sample_text(out, name, labels, buf);
}

void sample(std::string& out, std::string_view name, std::string_view labels, std::uint64_t value) {
  sample_text(out, name, labels, std::to_string(value).c_str());
}

void histogram(std::string& out, std::string_view name, std::string_view help, const Histogram::Snapshot& s, double scale) {
  family(out, name, help, Type::kHistogram);
  const std::string bucket = std::string(name) + "_bucket";
  char le[64];
  for (std::size_t i = 0; i < s.bounds.size(); ++i) {
    std::snprintf(le, sizeof le, "le=\"%g\"", s.bounds[i] * scale);
    sample(out, bucket, le, s.cumulative[i]);
  }
  sample(out, bucket, "le=\"+Inf\"", s.count);
  sample(out, std::string(name) + "_sum", {}, s.sum * scale);
  sample(out, std::string(name) + "_count", {}, s.count);
}

}  // namespace uma::prom
