package com.example.boot;

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
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Runs the application as a user would, in child JVMs on the class path of the installed
 * {@code dev.llb:llb-spring-ai-starter} and Spring AI's Ollama starter, with no {@code -D} flags:
 * {@code spring.ai.model.chat} picks the one {@code ChatModel}.
 */
class BootConsumerTest {
    @TempDir
    static Path dir;
    static Path model;

    record Run(int exit, String stdout, String stderr) {}

    @BeforeAll
    static void fixture() throws Exception {
        String cli = System.getProperty("llb.cli");
        assertTrue(cli != null && Files.isExecutable(Path.of(cli)), "set -Dllb.cli=/path/to/llb (generates the test model)");
        model = dir.resolve("tools.gguf");
        Run fixture = run(new ProcessBuilder(cli, "fixture", "--vocab", "qwen2", "--template", "Qwen-Qwen2.5-7B-Instruct",
                "--out", model.toString()));
        assertEquals(0, fixture.exit(), fixture.stdout() + fixture.stderr());
    }

    @Test
    void theClassPathHoldsBothStarters() throws Exception {
        List<String> jars;
        try (Stream<Path> list = Files.list(Path.of(System.getProperty("consumer.lib")))) {
            jars = list.map(p -> p.getFileName().toString()).sorted().toList();
        }
        assertTrue(jars.stream().anyMatch(j -> j.matches("llb-spring-ai-starter-\\d.*\\.jar")), jars.toString());
        assertTrue(jars.stream().anyMatch(j -> j.matches("spring-ai-autoconfigure-model-ollama-2\\..*\\.jar")), jars.toString());
        assertTrue(jars.stream().anyMatch(j -> j.matches("spring-ai-autoconfigure-model-chat-client-2\\..*\\.jar")), jars.toString());
    }

    @Test
    void springAiModelChatLlbGivesLlbsChatModelAlone() throws Exception {
        Run r = app("--spring.ai.model.chat=llb", "--llb.chat.model-path=" + model, "--llb.chat.threads=1",
                "--llb.chat.context-size=1024", "--llb.chat.parallel=1", "--llb.chat.options.max-tokens=16");
        assertEquals(0, r.exit(), r.stdout() + r.stderr());
        assertTrue(r.stdout().contains("chat models: {llbChatModel=dev.llb.springai.LlbChatModel}\n"), r.stdout());
        assertTrue(Pattern.compile("chat client answered: \\d+ chars\n").matcher(r.stdout()).find(), r.stdout());
    }

    @Test
    void springAiModelChatOllamaGivesNoneOfLlbs() throws Exception {
        // No llb.chat.model-path: llb's auto-configuration must not even look for a model.
        Run r = app("--spring.ai.model.chat=ollama");
        assertEquals(0, r.exit(), r.stdout() + r.stderr());
        assertTrue(r.stdout().contains("chat models: {ollamaChatModel=org.springframework.ai.ollama.OllamaChatModel}\n"), r.stdout());
        assertFalse(r.stdout().contains("dev.llb"), r.stdout());
        assertFalse(r.stdout().contains("chat client answered"), r.stdout());
    }

    private static Run app(String... args) throws Exception {
        List<String> command = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-XX:TieredStopAtLevel=1", "-cp",
                System.getProperty("consumer.classes") + File.pathSeparator + System.getProperty("consumer.lib") + File.separator + "*",
                "com.example.boot.Main"));
        command.addAll(List.of(args));
        ProcessBuilder app = new ProcessBuilder(command);
        app.environment().put("XDG_CACHE_HOME", dir.resolve("cache").toString());
        app.environment().remove("LD_LIBRARY_PATH");
        app.environment().remove("JAVA_TOOL_OPTIONS");
        return run(app);
    }

    private static Run run(ProcessBuilder pb) throws Exception {
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
