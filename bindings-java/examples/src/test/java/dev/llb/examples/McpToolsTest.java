package dev.llb.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.langchain4j.data.message.ChatMessage;
import dev.langchain4j.data.message.ToolExecutionResultMessage;
import dev.langchain4j.data.message.UserMessage;
import dev.langchain4j.mcp.McpToolProvider;
import dev.langchain4j.mcp.client.DefaultMcpClient;
import dev.langchain4j.mcp.client.McpClient;
import dev.langchain4j.mcp.client.transport.stdio.StdioMcpTransport;
import dev.langchain4j.model.chat.listener.ChatModelListener;
import dev.langchain4j.model.chat.listener.ChatModelRequestContext;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.request.ChatRequestParameters;
import dev.langchain4j.model.chat.request.ToolChoice;
import dev.langchain4j.model.output.FinishReason;
import dev.langchain4j.service.AiServices;
import dev.langchain4j.service.Result;
import dev.llb.ChatConfig;
import dev.llb.examples.mcp.McpWeatherApp;
import dev.llb.examples.mcp.WeatherMcpServer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.ai.chat.messages.Message;
import org.springframework.ai.chat.messages.ToolResponseMessage;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.tool.ToolCallback;
import org.springframework.ai.tool.ToolCallbackProvider;
import org.springframework.context.ConfigurableApplicationContext;
import reactor.core.publisher.Flux;

/**
 * MCP tools end to end: a local model (llb, in this JVM) calls {@code get_weather}, which
 * {@link WeatherMcpServer} serves in a child process over stdio; the result goes back to the
 * model, and the conversation finishes. Once through Spring AI's MCP client (the
 * {@link McpWeatherApp} example: llb's and Spring AI's Boot auto-configurations) and once through
 * LangChain4j's ({@code langchain4j-mcp} with {@code AiServices}).
 *
 * <p>On the random-weight fixture the call is forced ({@code tool_choice}); on the real-weights
 * SmolLM2 tool model ({@code -Dllb.smollm2.tools} or {@code LLB_SMOLLM2_TOOLS}, from
 * scripts/smollm2.sh) the city in the call must be the one the question names, and the answer
 * must carry the server's temperature.
 */
class McpToolsTest {
    static final Pattern REPORT = Pattern.compile("Sunny, \\d+ degrees Celsius in (\\w+)");
    static final Pattern LOGGED = Pattern.compile("get_weather (\\w+) pid (\\d+)");

    @TempDir
    static Path dir;

    static Path fixture;

    @BeforeAll
    static void models() {
        fixture = Processes.fixture(dir, "tools.gguf", "Qwen-Qwen2.5-7B-Instruct");
    }

    /** The SmolLM2 tool model, or skips the test (fails it when LLB_REQUIRE_REAL_WEIGHTS=1). */
    static Path smollm2() {
        String path = System.getProperty("llb.smollm2.tools", "");
        if (path.isEmpty()) {
            path = System.getenv().getOrDefault("LLB_SMOLLM2_TOOLS", "");
        }
        boolean required = "1".equals(System.getenv("LLB_REQUIRE_REAL_WEIGHTS"));
        if (required) {
            assertTrue(!path.isEmpty() && Files.isRegularFile(Path.of(path)), "LLB_REQUIRE_REAL_WEIGHTS=1 but no SmolLM2 tool model: " + path);
        }
        Assumptions.assumeTrue(!path.isEmpty() && Files.isRegularFile(Path.of(path)), "no SmolLM2 tool model (scripts/smollm2.sh)");
        return Path.of(path);
    }

    /** The city the MCP server reported, after checking that its child process served the one call ({@code WEATHER_MCP_LOG}). */
    static String served(String toolResult, Path log) throws IOException {
        Matcher m = REPORT.matcher(toolResult);
        assertTrue(m.find(), "the tool result is WeatherMcpServer's: " + toolResult);
        List<String> calls = Files.readAllLines(log);
        assertEquals(1, calls.size(), calls.toString());
        Matcher logged = LOGGED.matcher(calls.get(0));
        assertTrue(logged.matches(), calls.get(0));
        assertEquals(m.group(1), logged.group(1));
        assertNotEquals(ProcessHandle.current().pid(), Long.parseLong(logged.group(2)), "served by the child process");
        return m.group(1);
    }

    /** Records the prompts a ChatClient sends to the model. */
    static final class Recording implements ChatModel {
        final ChatModel model;
        final List<Prompt> prompts = Collections.synchronizedList(new ArrayList<>());

        Recording(ChatModel model) {
            this.model = model;
        }

        @Override
        public ChatResponse call(Prompt prompt) {
            prompts.add(prompt);
            return model.call(prompt);
        }

        @Override
        public Flux<ChatResponse> stream(Prompt prompt) {
            prompts.add(prompt);
            return model.stream(prompt);
        }

        @Override
        public ChatOptions getOptions() {
            return model.getOptions();
        }
    }

    /** The city the MCP server answered for, and the model's answer after it. */
    record Served(String city, String answer) {}

    /** Runs the example application on {@code model}. */
    static Served springAi(Path model, String question) throws IOException {
        Path log = Files.createTempFile(dir, "calls", ".log");
        try (ConfigurableApplicationContext app = McpWeatherApp.start("--llb.chat.model-path=" + model, "--llb.chat.threads=1",
                "--spring.ai.mcp.client.stdio.connections.weather.env.WEATHER_MCP_LOG=" + log,
                "--llb.chat.context-size=2048", "--llb.chat.parallel=1", "--llb.chat.options.max-tokens=64",
                "--llb.chat.options.parallel-tool-calls=false", "--spring.main.banner-mode=off")) {
            ToolCallbackProvider tools = app.getBean(ToolCallbackProvider.class);
            ToolCallback[] callbacks = tools.getToolCallbacks();
            assertEquals(1, callbacks.length);
            assertEquals("get_weather", callbacks[0].getToolDefinition().name());
            assertTrue(callbacks[0].getToolDefinition().inputSchema().contains("\"enum\""), callbacks[0].getToolDefinition().inputSchema());

            Recording model2 = new Recording(app.getBean(ChatModel.class));
            String answer = McpWeatherApp.ask(model2, tools, question);
            assertNotNull(answer);
            assertEquals(2, model2.prompts.size(), "one tool round, then the answer");
            List<Message> second = model2.prompts.get(1).getInstructions();
            ToolResponseMessage result = assertInstanceOf(ToolResponseMessage.class, second.get(second.size() - 1));
            assertEquals("get_weather", result.getResponses().get(0).name());
            System.out.println("Spring AI + MCP (" + model.getFileName() + "): " + result.getResponses().get(0).responseData()
                    + " -> " + answer.replace('\n', ' '));
            return new Served(served(result.getResponses().get(0).responseData(), log), answer);
        }
    }

    interface Assistant {
        Result<String> chat(String message);
    }

    /** Asks through LangChain4j's AiServices with the MCP server's tools. */
    @SuppressWarnings("try") // McpClient.close() declares Exception
    static Served langChain4j(Path model, String question) throws Exception {
        List<ChatRequest> requests = Collections.synchronizedList(new ArrayList<>());
        ChatModelListener listener = new ChatModelListener() {
            @Override
            public void onRequest(ChatModelRequestContext context) {
                requests.add(context.chatRequest());
            }
        };
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Path log = Files.createTempFile(dir, "calls", ".log");
        StdioMcpTransport transport = new StdioMcpTransport.Builder()
                .command(List.of(java, "-cp", System.getProperty("java.class.path"), WeatherMcpServer.class.getName()))
                .environment(Map.of("WEATHER_MCP_LOG", log.toString())).logEvents(false).build();
        try (McpClient mcp = new DefaultMcpClient.Builder().key("weather").transport(transport).build();
                dev.llb.langchain4j.LlbChatModel llb = dev.llb.langchain4j.LlbChatModel.builder()
                        .config(ChatConfig.of(model).withContextSize(2048).withThreads(1)).parallelToolCalls(false)
                        .defaultRequestParameters(ChatRequestParameters.builder().temperature(0.0).maxOutputTokens(64).build())
                        .listeners(List.of(listener)).build()) {
            Assistant assistant = AiServices.builder(Assistant.class).chatModel(llb)
                    .toolProvider(McpToolProvider.builder().mcpClients(mcp).build())
                    // Force a call on the user's turn; the turn after the tool result is the model's (AUTO).
                    .chatRequestTransformer(McpToolsTest::requireToolOnUserTurns).build();
            Result<String> result = assistant.chat(question);

            assertEquals(1, result.toolExecutions().size(), result.toolExecutions().toString());
            assertEquals("get_weather", result.toolExecutions().get(0).request().name());
            assertEquals(2, requests.size());
            List<ChatMessage> second = requests.get(1).messages();
            ToolExecutionResultMessage sent = assertInstanceOf(ToolExecutionResultMessage.class, second.get(second.size() - 1));
            assertEquals(result.toolExecutions().get(0).result(), sent.text());
            assertTrue(Set.of(FinishReason.STOP, FinishReason.LENGTH).contains(result.finishReason()), String.valueOf(result.finishReason()));
            assertTrue(result.finalResponse().aiMessage().toolExecutionRequests().isEmpty());
            System.out.println("LangChain4j + MCP (" + model.getFileName() + "): " + sent.text() + " -> " + result.content().replace('\n', ' '));
            return new Served(served(sent.text(), log), result.content());
        }
    }

    static ChatRequest requireToolOnUserTurns(ChatRequest request) {
        List<ChatMessage> messages = request.messages();
        if (!(messages.get(messages.size() - 1) instanceof UserMessage)) {
            return request;
        }
        return request.toBuilder().parameters(request.parameters().overrideWith(
                ChatRequestParameters.builder().toolChoice(ToolChoice.REQUIRED).build())).build();
    }

    @Test
    void springAiMcpClientServesTheModelsToolCall() throws Exception {
        assertTrue(WeatherMcpServer.CITIES.contains(springAi(fixture, "What is the weather in Paris?").city()));
    }

    @Test
    void langChain4jMcpClientServesTheModelsToolCall() throws Exception {
        assertTrue(WeatherMcpServer.CITIES.contains(langChain4j(fixture, "What is the weather in Paris?").city()));
    }

    @Test
    void aRealModelAsksTheMcpServerForTheCityInTheQuestion() throws Exception {
        Path smollm2 = smollm2();
        Served tokyo = springAi(smollm2, "What is the weather in Tokyo?");
        assertEquals("Tokyo", tokyo.city());
        Served lima = langChain4j(smollm2, "What is the weather in Lima?");
        assertEquals("Lima", lima.city());
        // The result reached the model and shaped its answer: the temperature comes only from the server.
        assertTrue(tokyo.answer().contains("17 degrees Celsius in Tokyo"), tokyo.answer());
        assertTrue(lima.answer().contains("20 degrees Celsius in Lima"), lima.answer());
    }
}
