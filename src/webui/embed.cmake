# Writes OUT, a C++ file defining `NAME` as the bytes of IN (cmake -DIN= -DOUT= -DNAME= -P embed.cmake):
# the web page's files become part of the binary, so nothing is read from disk or fetched at run time.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
file(WRITE "${OUT}" "// Generated from ${IN} by src/webui/embed.cmake.\n#include <cstddef>\nnamespace uma::webui {\n"
     "extern const unsigned char ${NAME}[] = {${body}0};\nextern const std::size_t ${NAME}_size = ${bytes};\n}\n")
