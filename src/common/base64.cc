#include "common/base64.h"

#include <array>
#include <cstdint>

namespace uma {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<signed char, 256> decode_table() {
  std::array<signed char, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kAlphabet[i])] = static_cast<signed char>(i);
  return t;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const auto b0 = static_cast<unsigned char>(bytes[i]);
    const auto b1 = i + 1 < bytes.size() ? static_cast<unsigned char>(bytes[i + 1]) : 0u;
    const auto b2 = i + 2 < bytes.size() ? static_cast<unsigned char>(bytes[i + 2]) : 0u;
    out += kAlphabet[b0 >> 2];
    out += kAlphabet[((b0 & 3) << 4) | (b1 >> 4)];
    out += i + 1 < bytes.size() ? kAlphabet[((b1 & 15) << 2) | (b2 >> 6)] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[b2 & 63] : '=';
  }
  return out;
}

bool base64_decode(std::string_view text, std::string* out) {
  static constexpr std::array<signed char, 256> kTable = decode_table();
  out->clear();
  out->reserve(text.size() / 4 * 3);
  std::uint32_t acc = 0;
  int bits = 0, pad = 0, symbols = 0;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++pad;
      ++symbols;
      continue;
    }
    const int v = kTable[c];
    if (v < 0 || pad > 0) return false;  // not in the alphabet, or data after padding
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    ++symbols;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (pad > 2 || (pad > 0 && symbols % 4 != 0)) return false;
  return symbols % 4 != 1;  // one symbol past a quad is not a byte
}

}  // namespace uma
