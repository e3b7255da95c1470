package dev.llb.springai;

import java.nio.file.Path;

/** {@link Fixtures} for the tests of other packages. */
public final class FixturesAccess {
    private FixturesAccess() {}

    /**
     * The tool-capable random-weight model.
     *
     * @param dir where to generate it
     * @return the GGUF
     */
    public static Path toolModel(Path dir) {
        return Fixtures.toolModel(dir);
    }
}
