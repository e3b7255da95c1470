package com.example.weather;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import java.util.zip.ZipEntry;
import java.util.zip.ZipFile;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Runs the application as a user would: {@code java -p ... -m com.example.weather/...}, on the
 * module path, with the installed {@code dev.llb:llb} jar and no {@code -D} flags, in a child JVM
 * whose library cache is a fresh directory ({@code XDG_CACHE_HOME}).
 */
class ConsumerTest {
    @TempDir
    static Path shared;

    static Path model;

    @TempDir
    Path dir;

    record Run(int exit, String stdout, String stderr) {}

    @BeforeAll
    static void fixture() throws Exception {
        String cli = System.getProperty("llb.cli");
        assertTrue(cli != null && Files.isExecutable(Path.of(cli)), "set -Dllb.cli=/path/to/llb (generates the test model)");
        model = shared.resolve("tools.gguf");
        Run r = run(List.of(cli, "fixture", "--vocab", "qwen2", "--template", "Qwen-Qwen2.5-7B-Instruct", "--out", model.toString()),
                shared);
        assertEquals(0, r.exit(), r.stdout() + r.stderr());
    }

    @Test
    void theInstalledJarCarriesTheLibraryAndTheApplicationMakesAToolCall() throws Exception {
        Path cache = dir.resolve("cache");
        Run r = app(List.of("--enable-native-access=dev.llb"), cache);
        assertEquals(0, r.exit(), r.stdout() + r.stderr());
        assertToolCall(r.stdout());
        // --enable-native-access=dev.llb is the whole story: the JVM warns about nothing.
        assertFalse(r.stderr().contains("WARNING"), r.stderr());
        // The library came out of the jar: one content-addressed copy in the cache, byte for byte the jar's entry.
        List<Path> files = regularFiles(cache);
        assertEquals(1, files.size(), files.toString());
        Path copy = files.get(0);
        assertEquals(cache.resolve("llb/native").resolve(copy.getParent().getFileName()).resolve("libllb.so"), copy);
        assertArrayEquals(bundledLibrary(), Files.readAllBytes(copy), "the extracted library differs from the jar's");
        // A second start reuses it.
        long written = Files.getLastModifiedTime(copy).toMillis();
        Run again = app(List.of("--enable-native-access=dev.llb"), cache);
        assertEquals(0, again.exit(), again.stdout() + again.stderr());
        assertEquals(List.of(copy), regularFiles(cache));
        assertEquals(written, Files.getLastModifiedTime(copy).toMillis());
    }

    @Test
    void theLibraryPathPropertyWins() throws Exception {
        Path cache = dir.resolve("cache");
        Run r = app(List.of("--enable-native-access=dev.llb", "-Dllb.library.path=" + System.getProperty("llb.library.path")), cache);
        assertEquals(0, r.exit(), r.stdout() + r.stderr());
        assertToolCall(r.stdout());
        assertEquals(List.of(), regularFiles(cache), "the bundled copy was extracted although -Dllb.library.path was set");
    }

    @Test
    void withoutTheFlagTheJvmNamesTheFlagForModuleDevLlb() throws Exception {
        Run r = app(List.of(), dir.resolve("cache"));
        assertEquals(0, r.exit(), r.stdout() + r.stderr());
        assertTrue(r.stderr().contains("--enable-native-access=dev.llb"), r.stderr());
    }

    /** {@code META-INF/native/linux-x86_64/libllb.so} of the installed {@code dev.llb:llb} jar on the module path. */
    private static byte[] bundledLibrary() throws IOException {
        List<Path> jars;
        try (Stream<Path> list = Files.list(Path.of(System.getProperty("consumer.lib")))) {
            jars = list.filter(p -> p.getFileName().toString().matches("llb-\\d.*\\.jar")).toList();
        }
        assertEquals(1, jars.size(), jars.toString());
        try (ZipFile jar = new ZipFile(jars.get(0).toFile())) {
            ZipEntry entry = jar.getEntry("META-INF/native/linux-x86_64/libllb.so");
            assertNotNull(entry, jars.get(0) + " carries no META-INF/native/linux-x86_64/libllb.so");
            try (InputStream in = jar.getInputStream(entry)) {
                return in.readAllBytes();
            }
        }
    }

    private static void assertToolCall(String stdout) throws IOException {
        assertTrue(stdout.contains("finish_reason: tool_calls\n"), stdout);
        assertTrue(stdout.contains("tool: get_weather\n"), stdout);
        String arguments = stdout.substring(stdout.indexOf("arguments: ") + "arguments: ".length()).strip();
        JsonNode args = new ObjectMapper().readTree(arguments);
        assertTrue(List.of("Paris", "Tokyo", "Lima").contains(args.path("city").asText()), arguments);
    }

    private Run app(List<String> jvmOptions, Path cache) throws Exception {
        List<String> command = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString()));
        command.addAll(jvmOptions);
        command.addAll(List.of("-p", System.getProperty("consumer.classes") + File.pathSeparator + System.getProperty("consumer.lib"),
                "-m", "com.example.weather/com.example.weather.Main", model.toString()));
        ProcessBuilder pb = new ProcessBuilder(command);
        pb.environment().put("XDG_CACHE_HOME", cache.toString());
        pb.environment().remove("LD_LIBRARY_PATH");
        pb.environment().remove("JAVA_TOOL_OPTIONS");
        return run(pb, dir);
    }

    private static Run run(List<String> command, Path workDir) throws Exception {
        return run(new ProcessBuilder(command), workDir);
    }

    private static Run run(ProcessBuilder pb, Path workDir) throws Exception {
        Path out = Files.createTempFile(workDir, "out", ".txt");
        Path err = Files.createTempFile(workDir, "err", ".txt");
        Process p = pb.redirectOutput(out.toFile()).redirectError(err.toFile()).start();
        if (!p.waitFor(120, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new AssertionError(pb.command() + " timed out");
        }
        return new Run(p.exitValue(), Files.readString(out, StandardCharsets.UTF_8), Files.readString(err, StandardCharsets.UTF_8));
    }

    private static List<Path> regularFiles(Path root) throws IOException {
        if (!Files.exists(root)) {
            return List.of();
        }
        try (Stream<Path> walk = Files.walk(root)) {
            return walk.filter(Files::isRegularFile).sorted().toList();
        }
    }
}
