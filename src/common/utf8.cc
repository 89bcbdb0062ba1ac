#include "common/utf8.h"

#include <cstdint>

namespace uma {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Length of the sequence a lead byte announces, or 0 if it cannot start one.
int sequence_length(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Valid range of the second byte given the lead (excludes overlongs, surrogates, > U+10FFFF).
bool second_byte_ok(unsigned char lead, unsigned char b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

enum class Scan { kComplete, kIncomplete, kInvalid };

// Checks the sequence at s[i]; `len` receives its announced length (1 when invalid).
Scan scan_at(std::string_view s, size_t i, int& len) {
  const auto lead = static_cast<unsigned char>(s[i]);
  len = sequence_length(lead);
  if (len == 0) { len = 1; return Scan::kInvalid; }
  for (int k = 1; k < len; ++k) {
    if (i + k >= s.size()) return Scan::kIncomplete;
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = (k == 1) ? second_byte_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) { len = 1; return Scan::kInvalid; }
  }
  return Scan::kComplete;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    int len = 0;
    if (scan_at(s, i, len) != Scan::kComplete) return false;
    i += len;
  }
  return true;
}

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    int len = 0;
    const Scan r = scan_at(pending_, i, len);
    if (r == Scan::kIncomplete) break;
    if (r == Scan::kInvalid) out.append(kReplacement);
    else out.append(pending_, i, len);
    i += len;
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Stream::finish() {
  std::string out;
  if (!pending_.empty()) out.append(kReplacement);
  pending_.clear();
  return out;
}

}  // namespace uma
