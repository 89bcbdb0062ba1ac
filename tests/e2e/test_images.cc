#include "e2e/test_images.h"

#include <cstdint>

#include "common/base64.h"

namespace uma::test {

// Rows bottom-up, each padded to 4 bytes.
std::string bmp(int w, int h, const std::function<Rgb(int, int)>& pixel) {
  const int row = (3 * w + 3) / 4 * 4;
  std::string b(54 + static_cast<std::size_t>(row) * static_cast<std::size_t>(h), '\0');
  auto put32 = [&](std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  };
  b[0] = 'B', b[1] = 'M';
  put32(2, static_cast<std::uint32_t>(b.size()));
  put32(10, 54);
  put32(14, 40);
  put32(18, static_cast<std::uint32_t>(w));
  put32(22, static_cast<std::uint32_t>(h));
  b[26] = 1, b[28] = 24;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const Rgb p = pixel(x, h - 1 - y);
      const std::size_t at = 54 + static_cast<std::size_t>(y) * static_cast<std::size_t>(row) + static_cast<std::size_t>(3 * x);
      b[at] = static_cast<char>(p.b), b[at + 1] = static_cast<char>(p.g), b[at + 2] = static_cast<char>(p.r);
    }
  }
  return b;
}

std::string data_url(const std::string& bmp_bytes) { return "data:image/bmp;base64," + base64_encode(bmp_bytes); }

}  // namespace uma::test
