package dev.llb;

import java.nio.file.Path;
import java.util.Objects;

/**
 * Entry point of llb's Java binding: library-wide queries. Chat goes through {@link ChatEngine}.
 *
 * <p>The native library is loaded on first use: from {@code -Dllb.library.path}, then
 * {@code java.library.path}, then the jar's bundled copy. Run with
 * {@code --enable-native-access=ALL-UNNAMED} (or the module's name) to allow it without a warning.
 * Every method here may be called from any thread.
 */
public final class Llb {
    private Llb() {}

    /** The loaded library's version and the llama.cpp it was built with. */
    public static VersionInfo version() {
        return VersionInfo.parse(Json.orThrow(Native.version()));
    }

    /**
     * Reads a GGUF's header (not its weights) and reports what its chat template can do.
     *
     * @throws LlbException {@code file_not_found}, {@code io_error}, {@code not_a_gguf},
     *     {@code template_error}, {@code invalid_argument}
     */
    public static ModelInfo modelInfo(Path gguf) {
        Objects.requireNonNull(gguf, "gguf");
        return ModelInfo.parse(Json.orThrow(Native.modelInfo(gguf.toString())));
    }
}
