package dev.llb;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.SymbolLookup;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The loading order: -Dllb.library.path, java.library.path, the bundled copy; and the failure message. */
class LibraryLoaderTest {
    @TempDir
    Path dir;

    static Path realLibrary() {
        String path = System.getProperty(LibraryLoader.PROPERTY);
        assertTrue(path != null && Files.isRegularFile(Path.of(path)), "set -Dllb.library.path=/path/to/libllb.so");
        return Path.of(path);
    }

    @Test
    void theExplicitPathComesFirst() {
        try (Arena arena = Arena.ofConfined()) {
            SymbolLookup lookup = LibraryLoader.load(realLibrary().toString(), dir.toString(), null, arena);
            assertTrue(lookup.find("llb_chat_infer").isPresent());
        }
    }

    @Test
    void javaLibraryPathIsSearchedWhenTheExplicitPathFails() throws IOException {
        Path libDir = Files.createDirectories(dir.resolve("lib"));
        Files.copy(realLibrary(), libDir.resolve(LibraryLoader.FILE_NAME));
        try (Arena arena = Arena.ofConfined()) {
            SymbolLookup lookup = LibraryLoader.load(dir.resolve("missing.so").toString(),
                    dir.resolve("empty") + File.pathSeparator + libDir, null, arena);
            assertTrue(lookup.find("llb_version").isPresent());
        }
    }

    @Test
    void theBundledCopyIsExtractedToTheCacheAndLoadedLast() throws IOException {
        Path resource = dir.resolve("jar").resolve(LibraryLoader.bundledResource());
        assertTrue(resource.toString().contains("META-INF/native/linux-x86_64/libllb.so")
                || !System.getProperty("os.arch").equals("amd64"), resource.toString());
        Files.createDirectories(resource.getParent());
        Files.copy(realLibrary(), resource);
        Path cache = dir.resolve("cache");
        try (URLClassLoader jar = new URLClassLoader(new URL[] {dir.resolve("jar").toUri().toURL()}, null);
                Arena arena = Arena.ofConfined()) {
            SymbolLookup lookup = LibraryLoader.load(null, dir.toString(), jar, cache, arena);
            assertTrue(lookup.find("llb_model_info").isPresent());
        }
        // One content-addressed copy: <cache>/<sha256>/libllb.so, byte-identical, no partial files left.
        List<Path> files;
        try (Stream<Path> walk = Files.walk(cache)) {
            files = walk.filter(Files::isRegularFile).toList();
        }
        assertEquals(1, files.size(), files.toString());
        Path copy = files.get(0);
        assertEquals(LibraryLoader.FILE_NAME, copy.getFileName().toString());
        assertTrue(copy.getParent().getFileName().toString().matches("[0-9a-f]{64}"), copy.toString());
        assertEquals(-1, Files.mismatch(copy, realLibrary()));
    }

    @Test
    void anUnwritableCacheFallsBackToATemporaryFile() throws IOException {
        Path resource = dir.resolve("jar").resolve(LibraryLoader.bundledResource());
        Files.createDirectories(resource.getParent());
        Files.copy(realLibrary(), resource);
        Path notADirectory = Files.writeString(dir.resolve("cache"), "a file where the cache directory would be");
        try (URLClassLoader jar = new URLClassLoader(new URL[] {dir.resolve("jar").toUri().toURL()}, null);
                Arena arena = Arena.ofConfined()) {
            SymbolLookup lookup = LibraryLoader.load(null, dir.toString(), jar, notADirectory.resolve("llb"), arena);
            assertTrue(lookup.find("llb_chat_create").isPresent());
        }
    }

    @Test
    void theCachedCopyIsReusedAndAnotherLibraryGetsItsOwnDirectory() throws IOException {
        byte[] one = "first".getBytes(java.nio.charset.StandardCharsets.UTF_8);
        byte[] two = "second".getBytes(java.nio.charset.StandardCharsets.UTF_8);
        Path cache = dir.resolve("cache");
        Path a = LibraryLoader.cachedCopy(one, cache);
        FileTime written = Files.getLastModifiedTime(a);
        Files.setLastModifiedTime(a, FileTime.fromMillis(written.toMillis() - 60_000));
        assertEquals(a, LibraryLoader.cachedCopy(one, cache));
        assertEquals(written.toMillis() - 60_000, Files.getLastModifiedTime(a).toMillis(), "rewritten instead of reused");
        Path b = LibraryLoader.cachedCopy(two, cache);
        assertTrue(!a.getParent().equals(b.getParent()), a + " " + b);
        assertArrayEquals(one, Files.readAllBytes(a));
        assertArrayEquals(two, Files.readAllBytes(b));
        // A truncated file at the final name (never written by llb itself) is replaced.
        Files.write(a, new byte[] {1});
        assertArrayEquals(one, Files.readAllBytes(LibraryLoader.cachedCopy(one, cache)));
    }

    @Test
    void theFailureListsEveryPlaceTriedInOrder() throws IOException {
        Path notALibrary = Files.write(dir.resolve("libllb.so"), foreignArchitectureCopy());
        Path missing = dir.resolve("nowhere").resolve("libllb.so");
        UnsatisfiedLinkError e = assertThrows(UnsatisfiedLinkError.class, () -> LibraryLoader.load(
                missing.toString(), dir + File.pathSeparator + dir.resolve("other"), null, Arena.ofAuto()));
        String message = e.getMessage();
        int explicit = message.indexOf(missing + " (-Dllb.library.path): no such file");
        int broken = message.indexOf(notALibrary + " (java.library.path): failed to load");
        int other = message.indexOf(dir.resolve("other").resolve("libllb.so") + " (java.library.path): no such file");
        int bundled = message.indexOf("classpath:" + LibraryLoader.bundledResource() + " (bundled): not in the jar");
        assertTrue(explicit >= 0 && explicit < broken && broken < other && other < bundled, message);
        assertTrue(message.contains("-Dllb.library.path="), message);
    }

    /**
     * The real library's ELF headers with another machine type: dlopen rejects it before mapping
     * anything. (A truncated library would crash the dynamic loader, and a non-ELF file makes the
     * JVM print a stack-guard warning.)
     */
    private static byte[] foreignArchitectureCopy() throws IOException {
        byte[] head = new byte[8192];
        try (var in = Files.newInputStream(realLibrary())) {
            assertEquals(head.length, in.readNBytes(head, 0, head.length));
        }
        int machine = (head[18] & 0xff) | (head[19] & 0xff) << 8;
        int other = machine == 62 ? 183 : 62; // EM_X86_64 <-> EM_AARCH64
        head[18] = (byte) other;
        head[19] = (byte) (other >> 8);
        return head;
    }

    /** A jar folder META-INF/native/<platform>/ holding the real library (or the given bytes). */
    private Path jarWith(String platform, byte[] library) throws IOException {
        Path resource = dir.resolve("jar").resolve(LibraryLoader.bundledResource(platform));
        Files.createDirectories(resource.getParent());
        if (library == null) {
            Files.copy(realLibrary(), resource);
        } else {
            Files.write(resource, library);
        }
        return resource.getParent();
    }

    private static String here() {
        return LibraryLoader.platform(System.getProperty("os.name"), System.getProperty("os.arch"));
    }

    @Test
    void aReleaseFolderIsExtractedWholeBesideTheLibrary() throws IOException {
        Path folder = jarWith(here(), null);
        // What scripts/release-jar.sh puts there: ggml's libraries and CPU modules, and the index.
        Files.writeString(folder.resolve("libggml-base.so.0"), "base");
        Files.writeString(folder.resolve("libggml-cpu-haswell.so"), "haswell");
        Files.writeString(folder.resolve(LibraryLoader.FILES), "libllb.so\nlibggml-base.so.0\nlibggml-cpu-haswell.so\n");
        Path cache = dir.resolve("cache");
        try (URLClassLoader jar = new URLClassLoader(new URL[] {dir.resolve("jar").toUri().toURL()}, null);
                Arena arena = Arena.ofConfined()) {
            assertTrue(LibraryLoader.load(null, null, jar, cache, arena).find("llb_version").isPresent());
        }
        assertEquals(here(), LibraryLoader.last().platform());
        assertEquals(null, LibraryLoader.last().note());
        List<Path> files;
        try (Stream<Path> walk = Files.walk(cache)) {
            files = walk.filter(Files::isRegularFile).sorted().toList();
        }
        assertEquals(3, files.size(), files.toString());
        Path copyDir = files.get(0).getParent();
        assertTrue(files.stream().allMatch(f -> f.getParent().equals(copyDir)), files.toString());
        assertEquals("haswell", Files.readString(copyDir.resolve("libggml-cpu-haswell.so")));
        assertEquals(-1, Files.mismatch(copyDir.resolve(LibraryLoader.FILE_NAME), realLibrary()));
    }

    @Test
    void aFileTheIndexListsButTheJarLacksIsNamed() throws IOException {
        Path folder = jarWith(here(), null);
        Files.writeString(folder.resolve(LibraryLoader.FILES), "libllb.so\nlibggml.so.0\n");
        try (URLClassLoader jar = new URLClassLoader(new URL[] {dir.resolve("jar").toUri().toURL()}, null)) {
            UnsatisfiedLinkError e = assertThrows(UnsatisfiedLinkError.class,
                    () -> LibraryLoader.load(null, null, jar, dir.resolve("cache"), Arena.ofAuto()));
            assertTrue(e.getMessage().contains(here() + "/libggml.so.0 (bundled, listed in files.list): not in the jar"),
                    e.getMessage());
        }
    }

    @Test
    void aMissingPlatformFailsWithOneLineNamingThePlatformsTheJarHas() throws IOException {
        jarWith("linux-riscv64", new byte[] {1});
        jarWith("windows-x86_64", new byte[] {2});
        Files.writeString(dir.resolve("jar").resolve(LibraryLoader.PLATFORMS), "windows-x86_64\nlinux-riscv64\n");
        try (URLClassLoader jar = new URLClassLoader(new URL[] {dir.resolve("jar").toUri().toURL()}, null)) {
            UnsatisfiedLinkError e = assertThrows(UnsatisfiedLinkError.class,
                    () -> LibraryLoader.load(null, null, jar, dir.resolve("cache"), Arena.ofAuto()));
            assertEquals("cannot load libllb.so: the jar has no native library for " + here()
                    + ", only for linux-riscv64, windows-x86_64 (-Dllb.library.path=/path/to/libllb.so loads one built"
                    + " for this machine)", e.getMessage());
        }
    }

    @Test
    void theCudaFolderIsPreferredWhenTheDriverLoads() throws IOException {
        jarWith(here(), null);
        jarWith(here() + "-cuda", null);
        try (URLClassLoader jar = new URLClassLoader(new URL[] {dir.resolve("jar").toUri().toURL()}, null);
                Arena arena = Arena.ofConfined()) {
            LibraryLoader.load(null, null, jar, dir.resolve("cache"), arena, a -> null);
        }
        assertEquals(here() + "-cuda", LibraryLoader.last().platform());
        assertEquals(null, LibraryLoader.last().note());
    }

    @Test
    void withoutTheDriverTheCpuLibraryIsUsedAndTheNoteSaysWhy() throws IOException {
        jarWith(here(), null);
        jarWith(here() + "-cuda", null);
        try (URLClassLoader jar = new URLClassLoader(new URL[] {dir.resolve("jar").toUri().toURL()}, null);
                Arena arena = Arena.ofConfined()) {
            LibraryLoader.load(null, null, jar, dir.resolve("cache"), arena, a -> "no NVIDIA driver (test)");
        }
        assertEquals(here(), LibraryLoader.last().platform());
        assertEquals("llb: the CUDA library " + here() + "-cuda is on the class path but not used: no NVIDIA driver"
                + " (test); using the CPU library " + here(), LibraryLoader.last().note());
    }

    @Test
    void aCudaLibraryThatFailsToLoadFallsBackToTheCpuOne() throws IOException {
        jarWith(here(), null);
        jarWith(here() + "-cuda", foreignArchitectureCopy());
        try (URLClassLoader jar = new URLClassLoader(new URL[] {dir.resolve("jar").toUri().toURL()}, null);
                Arena arena = Arena.ofConfined()) {
            LibraryLoader.load(null, null, jar, dir.resolve("cache"), arena, a -> null);
        }
        assertEquals(here(), LibraryLoader.last().platform());
        String note = LibraryLoader.last().note();
        assertTrue(note.contains("is on the class path but not used: it did not load (") && note.contains("failed to load"),
                note);
    }

    @Test
    void aCudaFolderWithoutACudaBackendSaysWhy() {
        String json = "{\"type\":\"version\",\"llb\":\"0.1.0\",\"abi\":1,\"backends\":[\"CPU\",\"RPC\"],"
                + "\"cpu\":{\"variant\":\"haswell\",\"module_errors\":[\"libggml-cuda.so: libcudart.so.12: cannot open"
                + " shared object file\"]}}";
        VersionInfo v = VersionInfo.parse(json, new LibraryLoader.Loaded("linux-x86_64-cuda", "bundled", null));
        assertEquals("haswell", v.cpuVariant());
        assertEquals(List.of("CPU", "RPC"), v.backends());
        assertEquals("linux-x86_64-cuda", v.platform());
        assertEquals("llb: the CUDA library linux-x86_64-cuda loaded but ggml has no CUDA backend (libggml-cuda.so:"
                + " libcudart.so.12: cannot open shared object file); running on the CPU",
                LibraryLoader.cudaBackendNote("linux-x86_64-cuda", v));
        assertEquals(null, LibraryLoader.cudaBackendNote("linux-x86_64", v));
        VersionInfo withCuda = VersionInfo.parse(json.replace("\"RPC\"", "\"CUDA\""),
                new LibraryLoader.Loaded("linux-x86_64-cuda", "bundled", null));
        assertEquals(null, LibraryLoader.cudaBackendNote("linux-x86_64-cuda", withCuda));
    }

    @Test
    void aCudaBackendWithoutAGpuSaysSo() {
        // What llb_version gives when libggml-cuda loads but the driver refuses CUDA (checked for
        // real by scripts/cuda-jar-check.sh): the backend is there, its device list is not.
        String cpu = "{\"name\":\"CPU\",\"description\":\"AMD EPYC\",\"type\":\"cpu\"}";
        String gpu = "{\"name\":\"CUDA0\",\"description\":\"NVIDIA H100\",\"type\":\"gpu\"}";
        String json = "{\"type\":\"version\",\"backends\":[\"CUDA\",\"CPU\",\"RPC\"],"
                + "\"cpu\":{\"variant\":\"haswell\",\"module_errors\":[]},\"devices\":[%s]}";
        LibraryLoader.Loaded cuda = new LibraryLoader.Loaded("linux-x86_64-cuda", "bundled", null);
        VersionInfo noGpu = VersionInfo.parse(json.formatted(cpu), cuda);
        assertEquals("llb: the CUDA library linux-x86_64-cuda loaded but ggml's CUDA backend found no GPU (the NVIDIA"
                + " driver failed to initialize CUDA: a driver older than this build's CUDA runtime, or no GPU visible"
                + " to this process); running on the CPU", LibraryLoader.cudaBackendNote("linux-x86_64-cuda", noGpu));
        assertEquals(null, LibraryLoader.cudaBackendNote("linux-x86_64", noGpu));
        VersionInfo withGpu = VersionInfo.parse(json.formatted(gpu + "," + cpu), cuda);
        assertEquals(null, LibraryLoader.cudaBackendNote("linux-x86_64-cuda", withGpu));
    }

    @Test
    void theDriverProbeNamesLibcuda() {
        try (Arena arena = Arena.ofConfined()) {
            String problem = LibraryLoader.CUDA_DRIVER.problem(arena);
            assertTrue(problem == null || problem.startsWith("no NVIDIA driver (libcuda.so.1 does not load: "), problem);
        }
    }

    @Test
    void platformNames() {
        assertEquals("linux-x86_64", LibraryLoader.platform("Linux", "amd64"));
        assertEquals("linux-aarch64", LibraryLoader.platform("Linux", "aarch64"));
        assertEquals("macos-aarch64", LibraryLoader.platform("Mac OS X", "aarch64"));
    }
}
