package dev.llb.springai;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.llb.ChatPool;
import dev.llb.ToolsUnsupportedException;
import dev.llb.springai.autoconfigure.LlbChatAutoConfiguration;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Configuration;

/**
 * The Boot auto-configuration from properties: a local GGUF, a Hugging Face id pulled at start-up
 * from a loopback mock hub into the configured cache, and start-up failures with llb's message.
 */
class LlbChatAutoConfigurationTest {
    private static final String COMMIT = "0123456789abcdef0123456789abcdef01234567";

    @TempDir
    static Path dir;

    static Path toolModel;
    static Path plainModel;
    static HttpServer hub;
    static String endpoint;

    final ApplicationContextRunner runner = new ApplicationContextRunner()
            .withConfiguration(AutoConfigurations.of(LlbChatAutoConfiguration.class))
            .withPropertyValues("llb.chat.threads=1", "llb.chat.context-size=2048", "llb.chat.parallel=2");

    /** A hub that serves {@code acme/tools-GGUF} (a tool-capable fixture) and {@code acme/plain-GGUF} (one llb refuses). */
    @BeforeAll
    static void start() throws Exception {
        toolModel = Fixtures.toolModel(dir);
        plainModel = Fixtures.plainModel(dir);
        Map<String, Path> repos = Map.of("acme/tools-GGUF", toolModel, "acme/plain-GGUF", plainModel);
        hub = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        hub.createContext("/", exchange -> {
            String path = exchange.getRequestURI().getPath();
            for (var repo : repos.entrySet()) {
                byte[] bytes = Files.readAllBytes(repo.getValue());
                String file = "model-Q4_K_M.gguf";
                String sha = sha256(bytes);
                if (path.startsWith("/api/models/" + repo.getKey() + "/")) {
                    String listing = "{\"id\":\"" + repo.getKey() + "\",\"sha\":\"" + COMMIT + "\",\"private\":false,\"gated\":false,"
                            + "\"disabled\":false,\"siblings\":[{\"rfilename\":\"" + file + "\",\"size\":" + bytes.length
                            + ",\"lfs\":{\"sha256\":\"" + sha + "\",\"size\":" + bytes.length + "}}]}";
                    send(exchange, 200, "application/json", listing.getBytes(StandardCharsets.UTF_8));
                    return;
                }
                if (path.equals("/" + repo.getKey() + "/resolve/" + COMMIT + "/" + file)) {
                    exchange.getResponseHeaders().add("X-Repo-Commit", COMMIT);
                    exchange.getResponseHeaders().add("X-Linked-Etag", "\"" + sha + "\"");
                    send(exchange, 200, "application/octet-stream", bytes);
                    return;
                }
            }
            exchange.getResponseHeaders().add("X-Error-Code", "RepoNotFound");
            send(exchange, 401, "text/plain", "Repository not found".getBytes(StandardCharsets.UTF_8));
        });
        hub.start();
        endpoint = "http://127.0.0.1:" + hub.getAddress().getPort();
    }

    @AfterAll
    static void stop() {
        hub.stop(0);
    }

    private static String sha256(byte[] bytes) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes));
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    private static void send(HttpExchange ex, int status, String type, byte[] body) throws IOException {
        ex.getResponseHeaders().add("Content-Type", type);
        ex.sendResponseHeaders(status, body.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(body);
        }
    }

    @Configuration(proxyBeanMethods = false)
    @EnableAutoConfiguration
    static class App {}

    @Test
    void aBootApplicationGetsAChatModelFromModelPath() {
        // A real start-up: Boot finds the auto-configuration through the jar's AutoConfiguration.imports.
        SpringApplication app = new SpringApplication(App.class);
        app.setWebApplicationType(WebApplicationType.NONE);
        ChatPool pool;
        try (ConfigurableApplicationContext context = app.run("--llb.chat.model-path=" + toolModel, "--llb.chat.threads=1",
                "--llb.chat.context-size=2048", "--llb.chat.parallel=2", "--llb.chat.options.temperature=0",
                "--llb.chat.options.max-tokens=64", "--llb.chat.options.parallel-tool-calls=false", "--llb.chat.options.tool-choice=required",
                "--llb.chat.options.tool-choice-after-tools=none")) {
            LlbChatModel model = assertInstanceOf(LlbChatModel.class, context.getBean(ChatModel.class));
            assertEquals(0.0, model.getOptions().getTemperature());
            assertEquals(64, model.getOptions().getMaxTokens());
            assertEquals("required", model.getOptions().getToolChoice());
            assertTrue(model.pool().stats().contains("\"n_parallel\":2"), model.pool().stats());

            LlbChatModelTest.WeatherTools tools = new LlbChatModelTest.WeatherTools();
            assertNotNull(ChatClient.create(model).prompt().user("Weather in Lima?").tools(tools).call().content());
            assertEquals(1, tools.cities.size());
            pool = model.pool();
        }
        assertTrue(pool.isClosed(), "the bean's pool closes with the context");
    }

    @Test
    void aHuggingFaceIdIsPulledIntoTheCacheAtStartUp() throws Exception {
        Path cache = Files.createTempDirectory(dir, "cache");
        runner.withPropertyValues("llb.chat.pull.repo=acme/tools-GGUF", "llb.chat.pull.cache-dir=" + cache,
                "llb.chat.pull.hub-endpoint=" + endpoint, "llb.chat.pull.token=").run(context -> {
            assertNull(context.getStartupFailure());
            LlbChatModel model = context.getBean(LlbChatModel.class);
            assertNotNull(model.call("hi"));
            try (var files = Files.walk(cache)) {
                assertTrue(files.anyMatch(p -> p.getFileName().toString().equals("model-Q4_K_M.gguf")), "pulled into " + cache);
            }
        });
    }

    @Test
    void aRefusedModelFailsStartUpWithLlbsMessage() throws Exception {
        runner.withPropertyValues("llb.chat.model-path=" + plainModel).run(context -> checkRefused(context.getStartupFailure()));
        Path cache = Files.createTempDirectory(dir, "cache");
        // The keys before llb.chat.pull.* still bind (deprecated aliases in the metadata).
        runner.withPropertyValues("llb.chat.model=acme/plain-GGUF", "llb.chat.cache-dir=" + cache,
                "llb.chat.hub-endpoint=" + endpoint, "llb.chat.token=").run(context -> checkRefused(context.getStartupFailure()));
    }

    private static void checkRefused(Throwable failure) {
        assertNotNull(failure, "start-up must fail");
        Throwable root = failure;
        while (root.getCause() != null) {
            root = root.getCause();
        }
        ToolsUnsupportedException refused = assertInstanceOf(ToolsUnsupportedException.class, root);
        assertTrue(refused.getMessage().contains("rejected"), refused.getMessage());
        assertTrue(failure.getMessage().contains(refused.getMessage()) || hasMessage(failure, "llb tools_unsupported: " + refused.getMessage()),
                "llb's message is in the failure: " + failure);
    }

    private static boolean hasMessage(Throwable t, String message) {
        for (; t != null; t = t.getCause()) {
            if (message.equals(t.getMessage())) {
                return true;
            }
        }
        return false;
    }

    @Test
    void theContextsObservationRegistryRecordsTheModelsCallsAndTheReasoningBudgetIsAnOption() {
        java.util.List<String> observed = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
        io.micrometer.observation.ObservationRegistry registry = io.micrometer.observation.ObservationRegistry.create();
        registry.observationConfig().observationHandler(new io.micrometer.observation.ObservationHandler<>() {
            @Override
            public void onStop(io.micrometer.observation.Observation.Context context) {
                observed.add(context.getName() + " " + LlbObservationTest.keys(context.getLowCardinalityKeyValues()));
            }

            @Override
            public boolean supportsContext(io.micrometer.observation.Observation.Context context) {
                return context instanceof org.springframework.ai.chat.observation.ChatModelObservationContext;
            }
        });
        runner.withBean(io.micrometer.observation.ObservationRegistry.class, () -> registry)
                .withPropertyValues("llb.chat.model-path=" + toolModel, "llb.chat.options.max-tokens=4",
                        "llb.chat.options.reasoning-budget=0").run(context -> {
            assertNull(context.getStartupFailure());
            LlbChatModel model = context.getBean(LlbChatModel.class);
            assertEquals(0, model.getOptions().getReasoningBudget());
            assertNotNull(model.call("hi"));
            assertEquals(1, observed.size(), observed.toString());
            assertTrue(observed.get(0).startsWith("gen_ai.client.operation ") && observed.get(0).contains("llb"), observed.toString());
        });
    }

    @Test
    void threadPropertiesReachLlb() {
        runner.withPropertyValues("llb.chat.model-path=" + toolModel, "llb.chat.adaptive-threads=false",
                "llb.chat.thread-poll=50").run(context -> {
            assertNull(context.getStartupFailure());
            assertNotNull(context.getBean(LlbChatModel.class).call("hi"));
        });
        // llb checks the value: out of range fails start-up with its message naming the field.
        runner.withPropertyValues("llb.chat.model-path=" + toolModel, "llb.chat.thread-poll=101").run(context -> {
            Throwable failure = context.getStartupFailure();
            assertNotNull(failure, "thread_poll 101 must be refused");
            assertTrue(hasMessageContaining(failure, "thread_poll"), failure.toString());
        });
    }

    @Test
    void aModelOnThePromptCacheDirOfAClosedContextReadsItsPromptFromThere() {
        Path cacheDir = dir.resolve("prompt-cache");
        // hundreds of tokens: llb keeps prompts of 64 tokens or more
        String system = java.util.stream.IntStream.range(0, 100).mapToObj(i -> "lighthouse" + (i % 37))
                .collect(java.util.stream.Collectors.joining(" "));
        org.springframework.ai.chat.prompt.Prompt prompt = new org.springframework.ai.chat.prompt.Prompt(java.util.List.of(
                new org.springframework.ai.chat.messages.SystemMessage(system),
                new org.springframework.ai.chat.messages.UserMessage("What is the answer?")));
        ApplicationContextRunner cached = runner.withPropertyValues("llb.chat.model-path=" + toolModel,
                "llb.chat.options.max-tokens=4", "llb.chat.prompt-cache.dir=" + cacheDir,
                "llb.chat.prompt-cache.disk-bytes=64MB", "llb.chat.prompt-cache.ram-bytes=0");
        long[] first = new long[1];
        cached.run(context -> {
            assertNull(context.getStartupFailure());
            var usage = context.getBean(LlbChatModel.class).call(prompt).getMetadata().getUsage();
            assertEquals(0L, usage.getCacheReadInputTokens(), usage.toString());
            first[0] = usage.getPromptTokens();
        }); // closing the context closes the pool, which writes its conversation to the directory
        cached.run(context -> {
            assertNull(context.getStartupFailure());
            var usage = context.getBean(LlbChatModel.class).call(prompt).getMetadata().getUsage();
            assertEquals(first[0], (long) usage.getPromptTokens());
            assertTrue(first[0] > 200 && usage.getCacheReadInputTokens() * 10 >= first[0] * 9, usage.toString());
        });
        // llb checks the settings: a disk budget without a directory fails start-up naming the field.
        runner.withPropertyValues("llb.chat.model-path=" + toolModel, "llb.chat.prompt-cache.disk-bytes=1GB").run(context -> {
            Throwable failure = context.getStartupFailure();
            assertNotNull(failure, "disk_bytes without dir must be refused");
            assertTrue(hasMessageContaining(failure, "prompt_cache.disk_bytes"), failure.toString());
        });
    }

    @Test
    void withoutAModelStartUpSaysWhatToSetAndEnabledFalseTurnsItOff() {
        runner.run(context -> {
            Throwable failure = context.getStartupFailure();
            assertNotNull(failure);
            assertTrue(hasMessageContaining(failure, "llb.chat.model-path"), failure.toString());
        });
        runner.withPropertyValues("llb.chat.enabled=false").run(context -> {
            assertNull(context.getStartupFailure());
            assertFalse(context.containsBean("llbChatModel"));
            assertThrows(Exception.class, () -> context.getBean(ChatModel.class));
        });
    }

    private static boolean hasMessageContaining(Throwable t, String text) {
        for (; t != null; t = t.getCause()) {
            if (t.getMessage() != null && t.getMessage().contains(text)) {
                return true;
            }
        }
        return false;
    }
}
