// The test binary's oracle: the shared Oracle (tools/oracle/oracle.h) on the test models' oracle
// file, loaded once on first use (a function-local static: thread-safe initialisation).
#pragma once

#include "tools/oracle/oracle.h"

namespace uma::test {

using uma::Oracle;

// The test models' oracle, loaded once per test binary.
const Oracle& oracle();

}  // namespace uma::test
