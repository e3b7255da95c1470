package com.example.springai;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Runs the application as a user would: {@code java -cp 'classes:lib/*' com.example.springai.Main},
 * with the installed {@code dev.llb:llb-spring-ai} and its dependencies only, and no {@code -D}
 * flags, in a child JVM whose library cache is a fresh directory ({@code XDG_CACHE_HOME}).
 */
class SpringAiConsumerTest {
    @TempDir
    Path dir;

    record Run(int exit, String stdout, String stderr) {}

    @Test
    void theApplicationGetsAToolCallThroughSpringAi() throws Exception {
        String cli = System.getProperty("llb.cli");
        assertTrue(cli != null && Files.isExecutable(Path.of(cli)), "set -Dllb.cli=/path/to/llb (generates the test model)");
        Path model = dir.resolve("tools.gguf");
        Run fixture = run(new ProcessBuilder(cli, "fixture", "--vocab", "qwen2", "--template", "Qwen-Qwen2.5-7B-Instruct",
                "--out", model.toString()));
        assertEquals(0, fixture.exit(), fixture.stdout() + fixture.stderr());

        // What the application depends on: llb-spring-ai, Spring AI, and what they bring; no Boot.
        List<String> jars;
        try (Stream<Path> list = Files.list(Path.of(System.getProperty("consumer.lib")))) {
            jars = list.map(p -> p.getFileName().toString()).sorted().toList();
        }
        assertTrue(jars.stream().anyMatch(j -> j.matches("llb-spring-ai-\\d.*\\.jar")), jars.toString());
        assertTrue(jars.stream().anyMatch(j -> j.matches("spring-ai-client-chat-2\\..*\\.jar")), jars.toString());
        assertFalse(jars.stream().anyMatch(j -> j.startsWith("spring-boot")), "Boot is optional in llb-spring-ai: " + jars);

        Path cache = dir.resolve("cache");
        ProcessBuilder app = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-cp",
                System.getProperty("consumer.classes") + File.pathSeparator + System.getProperty("consumer.lib") + File.separator + "*",
                "com.example.springai.Main", model.toString());
        app.environment().put("XDG_CACHE_HOME", cache.toString());
        app.environment().remove("LD_LIBRARY_PATH");
        app.environment().remove("JAVA_TOOL_OPTIONS");
        Run r = run(app);
        assertEquals(0, r.exit(), r.stdout() + r.stderr());
        assertTrue(r.stdout().contains("finish_reason: TOOL_CALLS\n"), r.stdout());
        assertTrue(r.stdout().contains("tool: get_weather\n"), r.stdout());
        Matcher arguments = Pattern.compile("arguments: \\{\"city\": ?\"(Paris|Tokyo|Lima)\"}\n").matcher(r.stdout());
        assertTrue(arguments.find(), r.stdout());
        // Spring AI's callback took the model's arguments: the tool ran with the city the model chose.
        assertTrue(r.stdout().contains("result: \"Sunny, 21 degrees in " + arguments.group(1) + "\""), r.stdout());
        // Native structured output: the record parsed from the grammar-bound reply.
        assertTrue(Pattern.compile("entity: Weather\\[city=(Paris|Tokyo|Lima), celsius=-?\\d+, sunny=(true|false)]\n")
                .matcher(r.stdout()).find(), r.stdout());
        // Metrics: the two calls' tokens, counted by Spring AI's meter handler.
        Matcher input = Pattern.compile("gen_ai.client.token.usage input: (\\d+)\n").matcher(r.stdout());
        Matcher output = Pattern.compile("gen_ai.client.token.usage output: (\\d+)\n").matcher(r.stdout());
        assertTrue(input.find() && Long.parseLong(input.group(1)) > 0, r.stdout());
        assertTrue(output.find() && Long.parseLong(output.group(1)) > 0, r.stdout());
        // The library came out of dev.llb:llb's jar into the fresh cache.
        try (Stream<Path> walk = Files.walk(cache)) {
            assertTrue(walk.anyMatch(p -> p.getFileName().toString().equals("libllb.so")), "libllb.so extracted into " + cache);
        }
    }

    private Run run(ProcessBuilder pb) throws Exception {
        Path out = Files.createTempFile(dir, "out", ".txt");
        Path err = Files.createTempFile(dir, "err", ".txt");
        Process p = pb.redirectOutput(out.toFile()).redirectError(err.toFile()).start();
        if (!p.waitFor(120, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new AssertionError(pb.command() + " timed out");
        }
        return new Run(p.exitValue(), Files.readString(out, StandardCharsets.UTF_8), Files.readString(err, StandardCharsets.UTF_8));
    }
}
