// The one translation unit that compiles Asio's and Beast's non-template code. The whole project
// is built with BOOST_ASIO_SEPARATE_COMPILATION and BOOST_BEAST_SEPARATE_COMPILATION (the root
// CMakeLists.txt), so every other file that includes them gets declarations only: a file using
// Asio compiles ~25% faster. A target that includes Asio or Beast links uma_asio.
#include <boost/asio/impl/src.hpp>
#include <boost/beast/src.hpp>
