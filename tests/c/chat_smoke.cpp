// The chat smoke test compiled as C++.
#include "chat_smoke.c"
