package dev.llb;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.SymbolLookup;
import java.net.URL;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;

/**
 * Finds and loads {@code libllb}, in this order:
 *
 * <ol>
 *   <li>the file named by the system property {@value #PROPERTY};
 *   <li>{@code libllb.so} in each directory of {@code java.library.path};
 *   <li>the copy bundled in the jar at {@code META-INF/native/<os>-<arch>/libllb.so}, extracted once
 *       to {@code $XDG_CACHE_HOME/llb/native/<sha256>/} (default {@code ~/.cache/llb/native/<sha256>/};
 *       content-addressed, written to a temporary name and renamed, so concurrent JVMs and different
 *       versions never see a half-written or wrong file), or, when that directory is not writable,
 *       to a temporary file deleted at exit.
 * </ol>
 *
 * <p>The first file that loads wins. When none does, the {@link UnsatisfiedLinkError} lists every
 * place tried and why each failed.
 */
@SuppressWarnings("restricted") // the binding's native access is confined to Native and LibraryLoader
final class LibraryLoader {
    static final String PROPERTY = "llb.library.path";
    static final String FILE_NAME = System.mapLibraryName("llb");

    private LibraryLoader() {}

    /** Loads the library for the lifetime of the JVM. */
    static SymbolLookup load() {
        return load(System.getProperty(PROPERTY), System.getProperty("java.library.path"),
                LibraryLoader.class.getClassLoader(), Arena.global());
    }

    static SymbolLookup load(String explicitPath, String javaLibraryPath, ClassLoader resources, Arena arena) {
        return load(explicitPath, javaLibraryPath, resources, cacheRoot(), arena);
    }

    static SymbolLookup load(String explicitPath, String javaLibraryPath, ClassLoader resources, Path cacheRoot,
            Arena arena) {
        List<String> tried = new ArrayList<>();
        if (explicitPath == null || explicitPath.isBlank()) {
            tried.add("-D" + PROPERTY + ": not set");
        } else {
            SymbolLookup found = tryFile(explicitPath, "-D" + PROPERTY, arena, tried);
            if (found != null) {
                return found;
            }
        }
        for (String dir : javaLibraryPath == null ? new String[0] : javaLibraryPath.split(File.pathSeparator)) {
            if (!dir.isEmpty()) {
                SymbolLookup found = tryFile(dir + File.separator + FILE_NAME, "java.library.path", arena, tried);
                if (found != null) {
                    return found;
                }
            }
        }
        SymbolLookup found = tryBundled(resources, cacheRoot, arena, tried);
        if (found != null) {
            return found;
        }
        throw new UnsatisfiedLinkError("cannot load " + FILE_NAME + "; tried, in order:\n  " + String.join("\n  ", tried)
                + "\nSet -D" + PROPERTY + "=/path/to/" + FILE_NAME + " (built by `cargo build --release` into target/release/).");
    }

    /** {@code META-INF/native/<os>-<arch>/libllb.so}, e.g. {@code META-INF/native/linux-x86_64/libllb.so}. */
    static String bundledResource() {
        return "META-INF/native/" + platform(System.getProperty("os.name"), System.getProperty("os.arch")) + "/" + FILE_NAME;
    }

    static String platform(String osName, String osArch) {
        String os = osName.toLowerCase(Locale.ROOT);
        os = os.startsWith("linux") ? "linux" : os.startsWith("mac") ? "macos" : os.startsWith("windows") ? "windows" : os.replace(' ', '_');
        String arch = switch (osArch.toLowerCase(Locale.ROOT)) {
            case "amd64", "x86_64" -> "x86_64";
            case "aarch64", "arm64" -> "aarch64";
            default -> osArch.toLowerCase(Locale.ROOT);
        };
        return os + "-" + arch;
    }

    private static SymbolLookup tryFile(String file, String source, Arena arena, List<String> tried) {
        Path path;
        try {
            path = Path.of(file).toAbsolutePath();
        } catch (InvalidPathException e) {
            tried.add(file + " (" + source + "): not a valid path");
            return null;
        }
        if (!Files.isRegularFile(path)) {
            tried.add(path + " (" + source + "): no such file");
            return null;
        }
        try {
            return SymbolLookup.libraryLookup(path, arena);
        } catch (IllegalArgumentException e) {
            tried.add(path + " (" + source + "): failed to load: " + e.getMessage());
            return null;
        }
    }

    private static SymbolLookup tryBundled(ClassLoader resources, Path cacheRoot, Arena arena, List<String> tried) {
        String name = bundledResource();
        URL url = resources == null ? null : resources.getResource(name);
        if (url == null) {
            tried.add("classpath:" + name + " (bundled): not in the jar");
            return null;
        }
        byte[] bytes;
        try (InputStream in = url.openStream()) {
            bytes = in.readAllBytes();
        } catch (IOException e) {
            tried.add("classpath:" + name + " (bundled): cannot read: " + e);
            return null;
        }
        Path copy;
        try {
            copy = cachedCopy(bytes, cacheRoot);
        } catch (IOException | RuntimeException e) {
            try {
                copy = Files.createTempFile("libllb-", "-" + FILE_NAME);
                copy.toFile().deleteOnExit();
                Files.write(copy, bytes);
            } catch (IOException e2) {
                tried.add("classpath:" + name + " (bundled): cannot extract: " + e2 + " (cache: " + e + ")");
                return null;
            }
        }
        return tryFile(copy.toString(), "bundled " + url, arena, tried);
    }

    /** {@code $XDG_CACHE_HOME/llb/native}, or {@code ~/.cache/llb/native}. */
    static Path cacheRoot() {
        String xdg = System.getenv("XDG_CACHE_HOME");
        Path base = xdg != null && !xdg.isBlank() && Path.of(xdg).isAbsolute()
                ? Path.of(xdg) : Path.of(System.getProperty("user.home"), ".cache");
        return base.resolve("llb").resolve("native");
    }

    /**
     * {@code root/<sha256 of bytes>/libllb.so}, written when missing: to a temporary file in the same
     * directory, then renamed over the final name, so a reader sees either no file or the whole one.
     */
    static Path cachedCopy(byte[] bytes, Path root) throws IOException {
        String hash;
        try {
            hash = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e); // every JDK has SHA-256
        }
        Path dir = root.resolve(hash);
        Path target = dir.resolve(FILE_NAME);
        if (Files.isRegularFile(target) && Files.size(target) == bytes.length) {
            return target;
        }
        Files.createDirectories(dir);
        Path partial = Files.createTempFile(dir, "." + FILE_NAME + "-", ".partial");
        try {
            Files.write(partial, bytes);
            try {
                Files.move(partial, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(partial, target, StandardCopyOption.REPLACE_EXISTING);
            }
        } finally {
            Files.deleteIfExists(partial);
        }
        return target;
    }
}
