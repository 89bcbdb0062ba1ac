// Prometheus text exposition (format 0.0.4), written once for every /metrics page here (umad's
// metrics table, uma-gw's page): a family's HELP and TYPE lines, its samples, a histogram's
// buckets. Pure; appends to `out`.
#pragma once

#include <string>
#include <string_view>

#include "metrics/histogram.h"

namespace uma::prom {

enum class Type { kCounter, kGauge, kHistogram };

void family(std::string& out, std::string_view name, std::string_view help, Type type);
// `labels`: "" or `key="value",...` without the braces.
void sample(std::string& out, std::string_view name, std::string_view labels, double value);
// A label's value as the text format wants it inside quotes (\\, \" and \n escaped).
std::string label_value(std::string_view v);
void sample(std::string& out, std::string_view name, std::string_view labels, std::uint64_t value);
// A family with one sample, unlabelled.
inline void metric(std::string& out, std::string_view name, std::string_view help, double value, Type type = Type::kCounter) {
  family(out, name, help, type);
  sample(out, name, {}, value);
}
// A histogram family; bounds and sum are multiplied by `scale` (e.g. ms -> s).
void histogram(std::string& out, std::string_view name, std::string_view help, const Histogram::Snapshot& s,
               double scale = 1.0);

}  // namespace uma::prom
