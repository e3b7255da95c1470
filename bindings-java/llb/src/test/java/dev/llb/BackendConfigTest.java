package dev.llb;

import static dev.llb.Completions.assertOneValidToolCall;
import static dev.llb.Completions.message;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.ServerSocket;
import java.nio.file.Path;
import java.util.List;
import java.util.function.UnaryOperator;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The device and memory fields of the config (issue 11) and its thread settings (issue 23)
 * through Java: every bad value is an {@link LlbException} naming the field, from
 * {@link ChatEngine#open} and {@link ChatPool#open} alike, and a config with every field at a
 * valid value serves a tool call.
 */
class BackendConfigTest {
    @TempDir
    static Path dir;
    static Path tools;

    @BeforeAll
    static void fixture() {
        tools = Fixtures.toolModel(dir);
    }

    private static void refused(UnaryOperator<ChatConfig> set, String code, String mentions) {
        ChatConfig config = set.apply(Fixtures.config(tools));
        LlbException engine = assertThrows(LlbException.class, () -> ChatEngine.open(config).close(), config.toJson());
        LlbException pool = assertThrows(LlbException.class, () -> ChatPool.open(config, 2).close(), config.toJson());
        for (LlbException e : List.of(engine, pool)) {
            assertEquals(code, e.code(), config.toJson() + ": " + e.getMessage());
            assertTrue(e.getMessage().contains(mentions), config.toJson() + ": " + e.getMessage());
        }
    }

    private static boolean hasGpu() {
        return Llb.devices().matches(".*\"type\":\"i?gpu\".*");
    }

    @Test
    void everyDeviceAndMemoryFieldIsChecked() throws Exception {
        refused(c -> c.withGpuLayers(-2), "invalid_argument", "n_gpu_layers");
        refused(c -> c.withOption("n_gpu_layers", "all"), "invalid_argument", "n_gpu_layers");
        refused(c -> c.withMainGpu(-1), "invalid_argument", "main_gpu");
        refused(c -> c.withMainGpu(64), "device_unavailable", "main_gpu");
        refused(c -> c.withSplitMode("diagonal"), "invalid_argument", "split_mode");
        refused(c -> c.withTensorSplit(1.0, -1.0), "invalid_argument", "tensor_split");
        refused(c -> c.withTensorSplit(new double[300]), "invalid_argument", "tensor_split");
        refused(c -> c.withDevices("NoSuchGPU7"), "device_unavailable", "NoSuchGPU7");
        refused(c -> c.withDevices("CPU"), "invalid_argument", "devices");
        refused(c -> c.withDevices(), "invalid_argument", "devices");
        refused(c -> c.withFlashAttn("maybe"), "invalid_argument", "flash_attn");
        refused(c -> c.withOption("offload_kqv", "yes"), "invalid_argument", "offload_kqv");
        refused(c -> c.withKvCacheTypes("q5_1", "f16"), "invalid_argument", "type_k");
        refused(c -> c.withKvCacheTypes("f16", "f32"), "invalid_argument", "type_v");
        refused(c -> c.withKvCacheTypes("f16", "q8_0").withFlashAttn("off"), "invalid_argument", "flash_attn");
        refused(c -> c.withOption("use_mmap", 1), "invalid_argument", "use_mmap");
        refused(c -> c.withOption("use_mlock", "no"), "invalid_argument", "use_mlock");
        refused(c -> c.withRpcServers(), "invalid_argument", "rpc_servers");
        refused(c -> c.withRpcServers("localhost"), "invalid_argument", "rpc_servers");
        int free;
        try (ServerSocket s = new ServerSocket(0)) {
            free = s.getLocalPort();
        }
        // Nothing listens there: refused at create, not a hang.
        refused(c -> c.withRpcServers("127.0.0.1:" + free), "device_unavailable", "127.0.0.1:" + free);
        if (!hasGpu()) {
            refused(c -> c.withGpuLayers(8), "device_unavailable", "no GPU device");
            refused(c -> c.withTensorSplit(1.0, 1.0), "device_unavailable", "tensor_split");
        }
    }

    @Test
    void everyFieldAtAValidValueServesAToolCall() {
        ChatConfig config = Fixtures.config(tools).withGpuLayers(0).withSplitMode("none").withFlashAttn("off")
                .withOffloadKqv(false).withKvCacheTypes("f16", "f16").withMmap(false).withMlock(false);
        String json = config.toJson();
        for (String field : List.of("n_gpu_layers", "split_mode", "flash_attn", "offload_kqv", "type_k", "type_v",
                "use_mmap", "use_mlock")) {
            assertTrue(json.contains("\"" + field + "\""), json);
        }
        try (ChatEngine engine = ChatEngine.open(config)) {
            assertOneValidToolCall(message(engine.infer(Requests.toolRequired())));
        }
        try (ChatPool pool = ChatPool.open(config, 2)) {
            assertOneValidToolCall(message(pool.infer(Requests.toolRequired())));
        }
    }

    @Test
    void threadSettingsReachLlbAndAreChecked() {
        ChatConfig config = Fixtures.config(tools).withAdaptiveThreads(false).withThreadPoll(50);
        var json = Json.parse(config.toJson());
        assertTrue(json.path("adaptive_threads").isBoolean(), config.toJson());
        assertFalse(json.path("adaptive_threads").booleanValue(), config.toJson());
        assertTrue(json.path("thread_poll").isInt(), config.toJson());
        assertEquals(50, json.path("thread_poll").intValue(), config.toJson());
        assertEquals(true, Json.parse(Fixtures.config(tools).withAdaptiveThreads(true).toJson())
                .path("adaptive_threads").booleanValue());
        // Unset: left out, so llb's defaults (adaptive threads, poll 0) apply.
        var unset = Json.parse(Fixtures.config(tools).toJson());
        assertTrue(unset.path("adaptive_threads").isMissingNode() && unset.path("thread_poll").isMissingNode(), unset.toString());

        try (ChatEngine engine = ChatEngine.open(config)) {
            assertOneValidToolCall(message(engine.infer(Requests.toolRequired())));
        }
        try (ChatPool pool = ChatPool.open(config.withAdaptiveThreads(true).withThreadPoll(0), 2)) {
            assertOneValidToolCall(message(pool.infer(Requests.toolRequired())));
        }
        refused(c -> c.withThreadPoll(101), "invalid_argument", "thread_poll");
        refused(c -> c.withThreadPoll(-1), "invalid_argument", "thread_poll");
        refused(c -> c.withOption("adaptive_threads", "yes"), "invalid_argument", "adaptive_threads");
    }

    @Test
    void theReasoningBudgetIsAConfigFieldLlbAccepts() {
        ChatConfig config = Fixtures.config(tools).withReasoningBudget(256);
        assertEquals(256, config.reasoningBudget());
        assertEquals(256, Json.parse(config.toJson()).path("reasoning_budget").intValue(), config.toJson());
        assertEquals(null, Fixtures.config(tools).reasoningBudget());
        try (ChatPool pool = ChatPool.open(config, 1)) {
            assertOneValidToolCall(message(pool.infer(Requests.toolRequired())));
        }
        refused(c -> c.withOption("reasoning_budget", "lots"), "invalid_argument", "reasoning_budget");
    }
}
