// The same check compiled as C++.
#include "header_only.c"
