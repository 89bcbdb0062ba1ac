// Images for the vision tests, drawn pixel by pixel: 24-bit BMPs (the decoder reads them as it
// reads PNG or JPEG) and their data URLs, as clients send them.
#pragma once

#include <functional>
#include <string>

namespace uma::test {

struct Rgb {
  unsigned char r, g, b;
};

// A w x h BMP whose pixel (x, y), y from the top, is pixel(x, y).
std::string bmp(int w, int h, const std::function<Rgb(int, int)>& pixel);
// "data:image/bmp;base64,...".
std::string data_url(const std::string& bmp_bytes);

}  // namespace uma::test
