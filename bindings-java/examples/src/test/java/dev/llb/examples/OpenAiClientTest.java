package dev.llb.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.stream.Collectors;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The example server, started by {@code run-example-server}, driven by the official {@code openai}
 * Python package (openai_client_check.py): tool calls with {@code tool_choice} required and named,
 * plain and streamed, read through the client's own parsing; errors as the client's exceptions; the
 * request fields the client sends (penalties, logit_bias, logprobs, reasoning_effort, ignored and
 * refused ones) with tool_choice auto, required and named.
 */
class OpenAiClientTest {
    @TempDir
    static Path dir;
    static Path python;

    @BeforeAll
    static void python() {
        python = Processes.pythonWithOpenAi();
    }

    @Test
    void theOpenAiClientGetsToolCallsPlainAndStreamed() throws Exception {
        Path model = Processes.fixture(dir, "tools.gguf", "Qwen-Qwen2.5-7B-Instruct");
        try (ServerProcess server = ServerProcess.start(model, dir)) {
            assertEquals(Set.of("models", "create_required", "create_named", "tool_loop", "stream_required",
                    "stream_named", "create_stream_raw", "error_invalid_argument", "error_unknown_field_streamed"),
                    runClient(server, "tools"));
        }
    }

    @Test
    void theOpenAiClientsRequestFieldsWorkOrAreRefusedByName() throws Exception {
        Path model = Processes.fixture(dir, "tools.gguf", "Qwen-Qwen2.5-7B-Instruct");
        try (ServerProcess server = ServerProcess.start(model, dir)) {
            assertEquals(Set.of("fields_create_auto", "fields_stream_auto", "fields_create_required",
                    "fields_stream_required", "fields_create_named", "fields_stream_named", "fields_stream_raw_logprobs",
                    "error_image_part", "error_audio_modality", "error_n_2", "error_top_logprobs_21"),
                    runClient(server, "fields"));
        }
    }

    @Test
    void aModelLlbRefusesIsAnsweredWith422AndLlbsMessage() throws Exception {
        Path model = Processes.fixture(dir, "plain.gguf", "google-gemma-2-2b-it");
        try (ServerProcess server = ServerProcess.start(model, dir)) {
            assertEquals(Set.of("models_empty", "refused_create", "refused_stream"), runClient(server, "refused"));
            assertTrue(server.log().contains("llb refused"), server.log());
        }
    }

    /** Runs the client checks; returns the names of those that passed. */
    private static Set<String> runClient(ServerProcess server, String mode) throws Exception {
        Processes.Result r = Processes.run(List.of(python.toString(), Processes.property("llb.client.script"),
                server.baseUrl, mode), 300);
        assertEquals(0, r.exitCode(), () -> "openai client checks failed:\n" + r.output() + "\nserver log:\n" + log(server));
        return r.output().lines().filter(l -> l.startsWith("PASS ")).map(l -> l.substring(5)).collect(Collectors.toSet());
    }

    private static String log(ServerProcess server) {
        try {
            return server.log();
        } catch (java.io.IOException e) {
            return "(unreadable: " + e + ")";
        }
    }
}
