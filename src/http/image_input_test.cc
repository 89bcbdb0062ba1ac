#include "http/image_input.h"

#include <gtest/gtest.h>

#include "common/base64.h"

namespace uma {
namespace {

std::string png_header(std::uint32_t w, std::uint32_t h) {
  std::string b("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", 16);
  for (std::uint32_t v : {w, h}) {
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<char>((v >> shift) & 0xFF));
  }
  return b + std::string("\x08\x02\0\0\0", 5);
}

std::string jpeg_header(std::uint16_t w, std::uint16_t h) {
  // SOI, an APP0 segment of 16 bytes, then SOF0: length, precision, height, width.
  std::string b("\xFF\xD8\xFF\xE0\x00\x10", 6);
  b += std::string(14, '\0');
  b += std::string("\xFF\xC0\x00\x11\x08", 5);
  b.push_back(static_cast<char>(h >> 8)), b.push_back(static_cast<char>(h & 0xFF));
  b.push_back(static_cast<char>(w >> 8)), b.push_back(static_cast<char>(w & 0xFF));
  return b + std::string(10, '\0');
}

TEST(ImageInput, ReadsTheSizeOfEachFormatFromItsHeader) {
  ImageSize s;
  ASSERT_TRUE(sniff_image_size(png_header(640, 480), &s));
  EXPECT_EQ(s.width, 640);
  EXPECT_EQ(s.height, 480);
  ASSERT_TRUE(sniff_image_size(jpeg_header(1024, 768), &s));
  EXPECT_EQ(s.width, 1024);
  EXPECT_EQ(s.height, 768);
  ASSERT_TRUE(sniff_image_size(std::string("GIF89a\x20\x01\x10\x00", 10), &s));
  EXPECT_EQ(s.width, 288);
  EXPECT_EQ(s.height, 16);
  std::string bmp = "BM" + std::string(24, '\0');
  bmp[18] = 8, bmp[22] = static_cast<char>(0xFC), bmp[23] = bmp[24] = bmp[25] = static_cast<char>(0xFF);  // height -4: top-down
  ASSERT_TRUE(sniff_image_size(bmp, &s));
  EXPECT_EQ(s.width, 8);
  EXPECT_EQ(s.height, 4);
  EXPECT_FALSE(sniff_image_size("RIFF....WEBPVP8 ", &s));
  EXPECT_FALSE(sniff_image_size(std::string("\xFF\xD8\xFF", 3), &s)) << "a cut header";
}

TEST(ImageInput, TakesDataUrlsAndBase64AndRefusesWhatItCannotHold) {
  const ImageLimits limits{4, 4000 * 3000, 1 << 20};
  std::string bytes;
  const std::string png = png_header(64, 64);
  ASSERT_TRUE(image_from_url("data:image/png;base64," + base64_encode(png), "f", limits, &bytes).ok());
  EXPECT_EQ(bytes, png);
  ASSERT_TRUE(image_from_base64(base64_encode(png), "f", limits, &bytes).ok());
  EXPECT_EQ(image_from_url("https://example.com/cat.png", "f", limits, &bytes).code(), ErrorCode::kNotSupported)
      << "nothing is fetched";
  EXPECT_EQ(image_from_url("data:image/png," + png, "f", limits, &bytes).code(), ErrorCode::kBadRequest) << "not base64";
  EXPECT_EQ(image_from_base64(base64_encode("plain text"), "f", limits, &bytes).code(), ErrorCode::kBadRequest);
  const Status bomb = image_from_base64(base64_encode(png_header(50000, 50000)), "images", limits, &bytes);
  EXPECT_EQ(bomb.code(), ErrorCode::kPromptTooLarge) << "refused from its header, before anything decodes";
  EXPECT_EQ(bomb.param(), "images");
  EXPECT_EQ(image_from_base64(base64_encode(png_header(0xFFFFFFFF, 0xFFFFFFFF)), "f", limits, &bytes).code(),
            ErrorCode::kPromptTooLarge) << "sides whose product overflows";
  EXPECT_EQ(image_from_base64(std::string(2 << 20, 'A'), "f", limits, &bytes).code(), ErrorCode::kPromptTooLarge);
  EXPECT_EQ(image_from_base64(base64_encode(png_header(0, 10)), "f", limits, &bytes).code(), ErrorCode::kBadRequest);
}

}  // namespace
}  // namespace uma
