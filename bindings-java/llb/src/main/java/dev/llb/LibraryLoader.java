package dev.llb;

import com.fasterxml.jackson.databind.JsonNode;
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
 *       to a temporary file deleted at exit. A platform folder with a {@value #FILES} index (the
 *       release jar, scripts/release-jar.sh) carries libllb beside ggml's shared libraries and its
 *       CPU-variant modules: every listed file is extracted into the same directory, where libllb
 *       finds them ({@code RUNPATH $ORIGIN}).
 * </ol>
 *
 * <p>A {@code <os>-<arch>-cuda} folder (the {@code linux-x86_64-cuda} classifier jar on the class
 * path) comes before the CPU one when the NVIDIA driver ({@code libcuda.so.1}) loads; when it does
 * not, or the CUDA library fails to load, the CPU library is used and one {@link System.Logger}
 * warning (logger {@code dev.llb}) says why; {@link Llb#version()} carries the same line.
 *
 * <p>The first file that loads wins. When none does, the {@link UnsatisfiedLinkError} lists every
 * place tried and why each failed; when the jar has native libraries but none for this platform,
 * it is one line naming the platforms it has.
 */
@SuppressWarnings("restricted") // the binding's native access is confined to Native and LibraryLoader
final class LibraryLoader {
    static final String PROPERTY = "llb.library.path";
    static final String FILE_NAME = System.mapLibraryName("llb");
    /** A platform folder's index: the files to extract beside libllb, one name a line. */
    static final String FILES = "files.list";
    /** The platforms a jar carries, one a line; every jar on the class path may have one. */
    static final String PLATFORMS = "META-INF/native/platforms.list";
    static final String CUDA_SUFFIX = "-cuda";

    /**
     * What was loaded: the platform folder ({@code linux-x86_64}, {@code linux-x86_64-cuda}; null
     * when the library came from a path), where from, and the line that explains a CUDA fallback
     * (null when there was none).
     */
    record Loaded(String platform, String source, String note) {}

    private static volatile Loaded loaded = new Loaded(null, null, null);
    /** The last load on this thread (tests load many times; only {@link #load()} sets {@link #loaded()}). */
    private static final ThreadLocal<Loaded> LAST = ThreadLocal.withInitial(() -> new Loaded(null, null, null));

    /** What the process's library was loaded from ({@link #load()}). */
    static Loaded loaded() {
        return loaded;
    }

    /** What the last load on this thread found. */
    static Loaded last() {
        return LAST.get();
    }

    /**
     * After a {@code -cuda} folder loaded: when ggml has no CUDA backend after all (its module
     * needs the CUDA runtime libraries, which the jar does not carry), or the backend found no GPU
     * (the driver refused: older than the CUDA runtime needs, or no GPU visible to the process), the
     * one warning says so and why ({@code llb_version}'s {@code cpu.module_errors}, its
     * {@code devices}), and {@link #loaded()} keeps it.
     */
    static void checkCudaBackend(VersionInfo v) {
        Loaded l = loaded;
        String note = cudaBackendNote(l.platform(), v);
        if (note != null) {
            System.getLogger("dev.llb").log(System.Logger.Level.WARNING, note);
            loaded = new Loaded(l.platform(), l.source(), note);
        }
    }

    static String cudaBackendNote(String platform, VersionInfo v) {
        if (platform == null || !platform.endsWith(CUDA_SUFFIX)) {
            return null;
        }
        if (v.backends().contains("CUDA")) {
            return hasGpu(v) ? null : "llb: the CUDA library " + platform + " loaded but ggml's CUDA backend found no GPU"
                    + " (the NVIDIA driver failed to initialize CUDA: a driver older than this build's CUDA runtime,"
                    + " or no GPU visible to this process); running on the CPU";
        }
        List<String> why = new ArrayList<>();
        Json.parse(v.json()).path("cpu").path("module_errors").forEach(e -> why.add(e.asText()));
        return "llb: the CUDA library " + platform + " loaded but ggml has no CUDA backend ("
                + (why.isEmpty() ? "no libggml-cuda.so beside libllb" : String.join("; ", why))
                + "); running on the CPU";
    }

    /** Whether {@code llb_version} lists a GPU among its devices (true when it has no device list). */
    private static boolean hasGpu(VersionInfo v) {
        JsonNode devices = Json.parse(v.json()).path("devices");
        if (!devices.isArray()) {
            return true;
        }
        for (JsonNode d : devices) {
            String type = d.path("type").asText();
            if (type.equals("gpu") || type.equals("igpu")) {
                return true;
            }
        }
        return false;
    }

    /** Probes the NVIDIA driver: null when it is there, else why not. */
    interface DriverProbe {
        String problem(Arena arena);
    }

    static final DriverProbe CUDA_DRIVER = arena -> {
        try {
            SymbolLookup.libraryLookup("libcuda.so.1", arena);
            return null;
        } catch (IllegalArgumentException e) {
            return "no NVIDIA driver (libcuda.so.1 does not load: " + e.getMessage() + ")";
        }
    };

    private LibraryLoader() {}

    /** Loads the library for the lifetime of the JVM. */
    static SymbolLookup load() {
        SymbolLookup lookup = load(System.getProperty(PROPERTY), System.getProperty("java.library.path"),
                LibraryLoader.class.getClassLoader(), Arena.global());
        loaded = LAST.get();
        return lookup;
    }

    static SymbolLookup load(String explicitPath, String javaLibraryPath, ClassLoader resources, Arena arena) {
        return load(explicitPath, javaLibraryPath, resources, cacheRoot(), arena);
    }

    static SymbolLookup load(String explicitPath, String javaLibraryPath, ClassLoader resources, Path cacheRoot,
            Arena arena) {
        return load(explicitPath, javaLibraryPath, resources, cacheRoot, arena, CUDA_DRIVER);
    }

    static SymbolLookup load(String explicitPath, String javaLibraryPath, ClassLoader resources, Path cacheRoot,
            Arena arena, DriverProbe driver) {
        List<String> tried = new ArrayList<>();
        LAST.set(new Loaded(null, null, null));
        if (explicitPath == null || explicitPath.isBlank()) {
            tried.add("-D" + PROPERTY + ": not set");
        } else {
            SymbolLookup found = tryFile(explicitPath, "-D" + PROPERTY, arena, tried);
            if (found != null) {
                LAST.set(new Loaded(null, "-D" + PROPERTY + "=" + explicitPath, null));
                return found;
            }
        }
        for (String dir : javaLibraryPath == null ? new String[0] : javaLibraryPath.split(File.pathSeparator)) {
            if (!dir.isEmpty()) {
                SymbolLookup found = tryFile(dir + File.separator + FILE_NAME, "java.library.path", arena, tried);
                if (found != null) {
                    LAST.set(new Loaded(null, "java.library.path " + dir, null));
                    return found;
                }
            }
        }
        String platform = platform(System.getProperty("os.name"), System.getProperty("os.arch"));
        String note = null;
        if (hasPlatform(resources, platform + CUDA_SUFFIX)) {
            String problem = driver.problem(arena);
            if (problem == null) {
                int before = tried.size();
                SymbolLookup found = tryBundled(resources, platform + CUDA_SUFFIX, cacheRoot, arena, tried);
                if (found != null) {
                    return found;
                }
                problem = "it did not load (" + String.join("; ", tried.subList(before, tried.size())) + ")";
            }
            note = "llb: the CUDA library " + platform + CUDA_SUFFIX + " is on the class path but not used: " + problem
                    + "; using the CPU library " + platform;
            System.getLogger("dev.llb").log(System.Logger.Level.WARNING, note);
        }
        SymbolLookup found = tryBundled(resources, platform, cacheRoot, arena, tried);
        if (found != null) {
            LAST.set(new Loaded(platform, LAST.get().source(), note));
            return found;
        }
        List<String> platforms = platforms(resources);
        if (!platforms.isEmpty() && !hasPlatform(resources, platform)) {
            String explicit = explicitPath == null || explicitPath.isBlank() ? "" : "; " + tried.get(0);
            throw new UnsatisfiedLinkError("cannot load " + FILE_NAME + ": the jar has no native library for " + platform
                    + ", only for " + String.join(", ", platforms) + explicit + " (-D" + PROPERTY
                    + "=/path/to/" + FILE_NAME + " loads one built for this machine)");
        }
        throw new UnsatisfiedLinkError("cannot load " + FILE_NAME + "; tried, in order:\n  " + String.join("\n  ", tried)
                + "\nSet -D" + PROPERTY + "=/path/to/" + FILE_NAME + " (built by `cargo build --release` into target/release/).");
    }

    /** {@code META-INF/native/<os>-<arch>/libllb.so}, e.g. {@code META-INF/native/linux-x86_64/libllb.so}. */
    static String bundledResource() {
        return bundledResource(platform(System.getProperty("os.name"), System.getProperty("os.arch")));
    }

    static String bundledResource(String platform) {
        return "META-INF/native/" + platform + "/" + FILE_NAME;
    }

    private static boolean hasPlatform(ClassLoader resources, String platform) {
        return resources != null && resources.getResource(bundledResource(platform)) != null;
    }

    /** The platforms named by every {@value #PLATFORMS} on the class path, sorted, without repeats. */
    static List<String> platforms(ClassLoader resources) {
        java.util.TreeSet<String> names = new java.util.TreeSet<>();
        if (resources == null) {
            return List.of();
        }
        try {
            for (URL url : java.util.Collections.list(resources.getResources(PLATFORMS))) {
                try (InputStream in = url.openStream()) {
                    new String(in.readAllBytes(), java.nio.charset.StandardCharsets.UTF_8).lines().map(String::strip)
                            .filter(l -> !l.isEmpty()).forEach(names::add);
                }
            }
        } catch (IOException e) {
            return List.copyOf(names);
        }
        return List.copyOf(names);
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

    private static SymbolLookup tryBundled(ClassLoader resources, String platform, Path cacheRoot, Arena arena,
            List<String> tried) {
        String name = bundledResource(platform);
        URL url = resources == null ? null : resources.getResource(name);
        if (url == null) {
            tried.add("classpath:" + name + " (bundled): not in the jar");
            return null;
        }
        String folder = "META-INF/native/" + platform + "/";
        List<String> files = new ArrayList<>();
        URL index = resources.getResource(folder + FILES);
        try {
            if (index != null) {
                try (InputStream in = index.openStream()) {
                    new String(in.readAllBytes(), java.nio.charset.StandardCharsets.UTF_8).lines().map(String::strip)
                            .filter(l -> !l.isEmpty()).forEach(files::add);
                }
            }
            if (!files.contains(FILE_NAME)) {
                files.add(0, FILE_NAME);
            }
        } catch (IOException e) {
            tried.add("classpath:" + folder + FILES + " (bundled): cannot read: " + e);
            return null;
        }
        List<byte[]> contents = new ArrayList<>();
        for (String file : files) {
            URL part = file.contains("/") ? null : resources.getResource(folder + file);
            if (part == null) {
                tried.add("classpath:" + folder + file + " (bundled, listed in " + FILES + "): not in the jar");
                return null;
            }
            try (InputStream in = part.openStream()) {
                contents.add(in.readAllBytes());
            } catch (IOException e) {
                tried.add("classpath:" + folder + file + " (bundled): cannot read: " + e);
                return null;
            }
        }
        Path copy;
        try {
            copy = cachedCopy(files, contents, cacheRoot);
        } catch (IOException | RuntimeException e) {
            try {
                Path tmp = Files.createTempDirectory("libllb-");
                tmp.toFile().deleteOnExit();
                for (int i = 0; i < files.size(); i++) {
                    Path f = Files.write(tmp.resolve(files.get(i)), contents.get(i));
                    f.toFile().deleteOnExit();
                }
                copy = tmp.resolve(FILE_NAME);
            } catch (IOException e2) {
                tried.add("classpath:" + name + " (bundled): cannot extract: " + e2 + " (cache: " + e + ")");
                return null;
            }
        }
        SymbolLookup found = tryFile(copy.toString(), "bundled " + url, arena, tried);
        if (found != null) {
            LAST.set(new Loaded(platform, "bundled " + url, null));
        }
        return found;
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
        return cachedCopy(List.of(FILE_NAME), List.of(bytes), root);
    }

    /**
     * {@code root/<sha256>/<name>} for each file, where the hash covers every name and content (a
     * single libllb.so: the hash of its bytes), so one directory always holds one consistent set;
     * returns the path of libllb.
     */
    static Path cachedCopy(List<String> names, List<byte[]> contents, Path root) throws IOException {
        String hash;
        try {
            MessageDigest digest = MessageDigest.getInstance("SHA-256");
            if (names.size() == 1) {
                digest.update(contents.get(0));
            } else {
                for (int i = 0; i < names.size(); i++) {
                    digest.update((names.get(i) + "\0" + contents.get(i).length + "\0")
                            .getBytes(java.nio.charset.StandardCharsets.UTF_8));
                    digest.update(contents.get(i));
                }
            }
            hash = HexFormat.of().formatHex(digest.digest());
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e); // every JDK has SHA-256
        }
        Path dir = root.resolve(hash);
        // libllb last: its presence at full size means the others were written before it.
        for (int i = names.size() - 1; i >= 0; i--) {
            if (!names.get(i).equals(FILE_NAME)) {
                writeOnce(dir, names.get(i), contents.get(i));
            }
        }
        return writeOnce(dir, FILE_NAME, contents.get(names.indexOf(FILE_NAME)));
    }

    private static Path writeOnce(Path dir, String name, byte[] bytes) throws IOException {
        Path target = dir.resolve(name);
        if (Files.isRegularFile(target) && Files.size(target) == bytes.length) {
            return target;
        }
        Files.createDirectories(dir);
        Path partial = Files.createTempFile(dir, "." + name + "-", ".partial");
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
