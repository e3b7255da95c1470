// The smoke test compiled as C++: the header and the calls must work from C++ hosts too.
#include "smoke.c"
