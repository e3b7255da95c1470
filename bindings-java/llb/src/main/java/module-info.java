/**
 * llb's Java binding: tool-calling chat completions over llama.cpp through the foreign function
 * and memory API.
 *
 * <p>The binding calls native code, so run with {@code --enable-native-access=dev.llb} (module
 * path) or {@code --enable-native-access=ALL-UNNAMED} (class path).
 */
module dev.llb {
    requires com.fasterxml.jackson.databind;

    exports dev.llb;
}
