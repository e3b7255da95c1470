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
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
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
 * scripts/smollm2.sh) the city in the call must be the one the question names.
 */
class McpToolsTest {
    static final Pattern REPORT = Pattern.compile("degrees Celsius in (\\w+) \\(WeatherMcpServer pid (\\d+)\\)");

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

    /** The city the MCP server reported, after checking the report came from its own process. */
    static String served(String toolResult) {
        Matcher m = REPORT.matcher(toolResult);
        assertTrue(m.find(), "the tool result is WeatherMcpServer's: " + toolResult);
        assertNotEquals(ProcessHandle.current().pid(), Long.parseLong(m.group(2)), "served by the child process");
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

    /** Runs the example application on {@code model}; returns the city the MCP server answered for. */
    static String springAi(Path model, String question) {
        try (ConfigurableApplicationContext app = McpWeatherApp.start("--llb.chat.model-path=" + model, "--llb.chat.threads=1",
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
                    + " -> " + answer);
            return served(result.getResponses().get(0).responseData());
        }
    }

    interface Assistant {
        Result<String> chat(String message);
    }

    /** Asks through LangChain4j's AiServices with the MCP server's tools; returns the city it answered for. */
    @SuppressWarnings("try") // McpClient.close() declares Exception
    static String langChain4j(Path model, String question) throws Exception {
        List<ChatRequest> requests = Collections.synchronizedList(new ArrayList<>());
        ChatModelListener listener = new ChatModelListener() {
            @Override
            public void onRequest(ChatModelRequestContext context) {
                requests.add(context.chatRequest());
            }
        };
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        StdioMcpTransport transport = new StdioMcpTransport.Builder()
                .command(List.of(java, "-cp", System.getProperty("java.class.path"), WeatherMcpServer.class.getName()))
                .logEvents(false).build();
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
            System.out.println("LangChain4j + MCP (" + model.getFileName() + "): " + sent.text() + " -> " + result.content());
            return served(sent.text());
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
    void springAiMcpClientServesTheModelsToolCall() {
        assertTrue(WeatherMcpServer.CITIES.contains(springAi(fixture, "What is the weather in Paris?")));
    }

    @Test
    void langChain4jMcpClientServesTheModelsToolCall() throws Exception {
        assertTrue(WeatherMcpServer.CITIES.contains(langChain4j(fixture, "What is the weather in Paris?")));
    }

    @Test
    void aRealModelAsksTheMcpServerForTheCityInTheQuestion() throws Exception {
        Path smollm2 = smollm2();
        assertEquals("Tokyo", springAi(smollm2, "What is the weather in Tokyo?"));
        assertEquals("Lima", langChain4j(smollm2, "What is the weather in Lima?"));
    }
}
