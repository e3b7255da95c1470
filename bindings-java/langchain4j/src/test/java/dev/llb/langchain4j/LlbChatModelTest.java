package dev.llb.langchain4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.langchain4j.agent.tool.ToolExecutionRequest;
import dev.langchain4j.agent.tool.ToolSpecification;
import dev.langchain4j.data.message.AiMessage;
import dev.langchain4j.data.message.ImageContent;
import dev.langchain4j.data.message.SystemMessage;
import dev.langchain4j.data.message.TextContent;
import dev.langchain4j.data.message.ToolExecutionResultMessage;
import dev.langchain4j.data.message.UserMessage;
import dev.langchain4j.exception.InvalidRequestException;
import dev.langchain4j.exception.LangChain4jException;
import dev.langchain4j.exception.ModelNotFoundException;
import dev.langchain4j.exception.UnsupportedFeatureException;
import dev.langchain4j.model.chat.Capability;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.request.ResponseFormat;
import dev.langchain4j.model.chat.request.ResponseFormatType;
import dev.langchain4j.model.chat.request.ToolChoice;
import dev.langchain4j.model.chat.request.json.JsonArraySchema;
import dev.langchain4j.model.chat.request.json.JsonObjectSchema;
import dev.langchain4j.model.chat.request.json.JsonSchema;
import dev.langchain4j.model.chat.response.ChatResponse;
import dev.langchain4j.model.chat.response.CompleteToolCall;
import dev.langchain4j.model.chat.response.PartialResponse;
import dev.langchain4j.model.chat.response.PartialResponseContext;
import dev.langchain4j.model.chat.response.PartialToolCall;
import dev.langchain4j.model.chat.response.StreamingChatResponseHandler;
import dev.langchain4j.model.output.FinishReason;
import dev.llb.ChatConfig;
import dev.llb.LlbException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The models on their own: the request JSON, tool calls (whole and streamed), finish reasons, usage, errors. */
class LlbChatModelTest {
    @TempDir
    static Path dir;

    static LlbChatModel model;
    static LlbStreamingChatModel streaming;

    @BeforeAll
    static void open() {
        Path gguf = Fixtures.toolModel(dir);
        model = LlbChatModel.builder().config(Fixtures.config(gguf)).seed(7L).strictTools(true).parallelToolCalls(false).build();
        streaming = LlbStreamingChatModel.builder().config(Fixtures.config(gguf)).seed(7L).strictTools(true).parallelToolCalls(false).build();
    }

    @AfterAll
    static void close() {
        model.close();
        streaming.close();
    }

    /** Bounded (enums, strict): a random-weight model's call ends within a few tokens. */
    static final ToolSpecification FORECAST = ToolSpecification.builder().name("get_forecast")
            .description("Weather forecast for a city")
            .parameters(JsonObjectSchema.builder()
                    .addEnumProperty("city", List.of("Oslo", "Lima"), "the city")
                    .addEnumProperty("unit", List.of("celsius", "fahrenheit"))
                    .required("city", "unit").build())
            .build();

    static ChatRequest.Builder forecastRequest(ToolChoice choice) {
        return ChatRequest.builder().messages(UserMessage.from("Forecast for Oslo?"))
                .toolSpecifications(FORECAST).toolChoice(choice).temperature(0.0).maxOutputTokens(96);
    }

    @Test
    void theRequestJsonIsOpenAisShape() {
        ToolExecutionRequest call = ToolExecutionRequest.builder().id("call_1").name("get_forecast").arguments("{\"city\":\"Oslo\",\"unit\":\"celsius\"}").build();
        ChatRequest request = ChatRequest.builder()
                .messages(SystemMessage.from("Be brief."), UserMessage.from("Forecast for Oslo?"), AiMessage.from(call),
                        ToolExecutionResultMessage.from(call, "rain"),
                        UserMessage.from(TextContent.from("And "), TextContent.from("tomorrow?")))
                .toolSpecifications(FORECAST).toolChoice(ToolChoice.AUTO).temperature(0.5).topP(0.9).topK(40)
                .maxOutputTokens(100).stopSequences(List.of("END")).build();
        // As ChatModel.chat merges them: the model's defaults (llb's fields), the request's over them.
        ChatRequest merged = ChatRequest.builder().messages(request.messages()).parameters(LlbChatRequestParameters.builder()
                .seed(3L).parallelToolCalls(false).reasoningBudget(2048).build().overrideWith(request.parameters())).build();
        JsonNode json = Mapping.parse(Mapping.request(merged, new Mapping.Style(false, false)));
        assertEquals(Mapping.parse("""
                [{"role":"system","content":"Be brief."},
                 {"role":"user","content":"Forecast for Oslo?"},
                 {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
                   "function":{"name":"get_forecast","arguments":"{\\"city\\":\\"Oslo\\",\\"unit\\":\\"celsius\\"}"}}]},
                 {"role":"tool","content":"rain","tool_call_id":"call_1"},
                 {"role":"user","content":[{"type":"text","text":"And "},{"type":"text","text":"tomorrow?"}]}]"""),
                json.get("messages"));
        assertEquals(Mapping.parse("""
                [{"type":"function","function":{"name":"get_forecast","description":"Weather forecast for a city",
                  "parameters":{"type":"object","properties":{"city":{"type":"string","enum":["Oslo","Lima"],"description":"the city"},
                    "unit":{"type":"string","enum":["celsius","fahrenheit"]}},
                    "required":["city","unit"]}}}]"""), json.get("tools"));
        ToolSpecification nested = ToolSpecification.builder().name("plan").parameters(JsonObjectSchema.builder()
                .addProperty("stops", JsonArraySchema.builder().items(JsonObjectSchema.builder()
                        .addStringProperty("city").additionalProperties(false).build()).build())
                .additionalProperties(false).build()).build();
        JsonNode closed = Mapping.tool(nested, false).path("function").path("parameters");
        assertEquals(false, closed.path("additionalProperties").asBoolean(true), closed.toString());
        assertEquals(false, closed.at("/properties/stops/items/additionalProperties").asBoolean(true), closed.toString());
        JsonNode strict = Mapping.tool(FORECAST, true);
        assertTrue(strict.at("/function/strict").asBoolean(), strict.toString());
        assertEquals(false, strict.at("/function/parameters/additionalProperties").asBoolean(true), strict.toString());
        assertEquals("auto", json.get("tool_choice").asText());
        assertEquals(0.5, json.get("temperature").asDouble());
        assertEquals(0.9, json.get("top_p").asDouble(), 1e-9);
        assertEquals(40, json.get("top_k").asInt());
        assertEquals(100, json.get("max_tokens").asInt());
        assertEquals("[\"END\"]", json.get("stop").toString());
        assertEquals(3, json.get("seed").asLong());
        assertEquals(false, json.get("parallel_tool_calls").asBoolean());
        assertEquals(2048, json.get("reasoning_budget").asInt());
        assertEquals("required", Mapping.toolChoice(ToolChoice.REQUIRED));
        assertEquals("none", Mapping.toolChoice(ToolChoice.NONE));
    }

    @Test
    void aRequiredToolCallFollowsTheSpecification() throws Exception {
        ChatResponse response = model.chat(forecastRequest(ToolChoice.REQUIRED).build());
        assertEquals(FinishReason.TOOL_EXECUTION, response.finishReason());
        List<ToolExecutionRequest> calls = response.aiMessage().toolExecutionRequests();
        assertTrue(!calls.isEmpty(), response.toString());
        for (ToolExecutionRequest call : calls) {
            assertEquals("get_forecast", call.name());
            assertTrue(call.id().startsWith("call_"), call.id());
            JsonNode args = Mapping.parse(call.arguments());
            assertTrue(List.of("Oslo", "Lima").contains(args.path("city").asText()), call.arguments());
            assertEquals(2, args.size(), call.arguments());
            assertTrue(List.of("celsius", "fahrenheit").contains(args.path("unit").asText()), call.arguments());
        }
        LlbTokenUsage usage = assertInstanceOf(LlbTokenUsage.class, response.tokenUsage());
        assertTrue(usage.inputTokenCount() > 0 && usage.outputTokenCount() > 0, usage.toString());
        assertEquals(usage.inputTokenCount() + usage.outputTokenCount(), usage.totalTokenCount());
        assertTrue(response.id().startsWith("chatcmpl"), response.id());
        assertEquals("tools.gguf", response.modelName());
    }

    @Test
    void aJsonSchemaResponseFormatConstrainsTheReply() {
        ResponseFormat format = ResponseFormat.builder().type(ResponseFormatType.JSON)
                .jsonSchema(JsonSchema.builder().name("verdict").rootElement(JsonObjectSchema.builder()
                        .addEnumProperty("answer", List.of("yes", "no")).required("answer").additionalProperties(false).build())
                        .build())
                .build();
        ChatRequest request = ChatRequest.builder().messages(UserMessage.from("Is Oslo in Norway?"))
                .responseFormat(format).temperature(0.0).maxOutputTokens(32).build();
        JsonNode sent = Mapping.parse(Mapping.request(request, new Mapping.Style(false, false)));
        assertEquals(Mapping.parse("""
                {"type":"json_schema","json_schema":{"name":"verdict","schema":{"type":"object",
                  "properties":{"answer":{"type":"string","enum":["yes","no"]}},"required":["answer"],
                  "additionalProperties":false}}}"""), sent.get("response_format"));
        assertTrue(model.supportedCapabilities().contains(Capability.RESPONSE_FORMAT_JSON_SCHEMA));

        ChatResponse response = model.chat(request);
        assertEquals(FinishReason.STOP, response.finishReason(), response.toString());
        JsonNode reply = Mapping.parse(response.aiMessage().text());
        assertEquals(1, reply.size(), reply.toString());
        assertTrue(List.of("yes", "no").contains(reply.path("answer").asText()), reply.toString());
    }

    @Test
    void toolChoiceNoneAndAMaxTokensCutAreLength() {
        ChatResponse response = model.chat(forecastRequest(ToolChoice.NONE).maxOutputTokens(3).build());
        assertEquals(FinishReason.LENGTH, response.finishReason());
        assertTrue(response.aiMessage().toolExecutionRequests().isEmpty());
        assertEquals(3, response.tokenUsage().outputTokenCount());
    }

    @Test
    void streamedToolCallArgumentsAddUpToTheCompleteCalls() throws Exception {
        List<PartialToolCall> partials = Collections.synchronizedList(new ArrayList<>());
        List<CompleteToolCall> completes = Collections.synchronizedList(new ArrayList<>());
        CompletableFuture<ChatResponse> done = new CompletableFuture<>();
        List<String> threads = Collections.synchronizedList(new ArrayList<>());
        streaming.chat(forecastRequest(ToolChoice.REQUIRED).build(), new StreamingChatResponseHandler() {
            @Override
            public void onPartialResponse(String text) {}

            @Override
            public void onPartialToolCall(PartialToolCall call) {
                threads.add(Thread.currentThread().getName());
                partials.add(call);
            }

            @Override
            public void onCompleteToolCall(CompleteToolCall call) {
                completes.add(call);
            }

            @Override
            public void onCompleteResponse(ChatResponse response) {
                done.complete(response);
            }

            @Override
            public void onError(Throwable error) {
                done.completeExceptionally(error);
            }
        });
        ChatResponse response = done.get(120, TimeUnit.SECONDS);
        assertEquals(FinishReason.TOOL_EXECUTION, response.finishReason());
        List<ToolExecutionRequest> calls = response.aiMessage().toolExecutionRequests();
        assertEquals(calls.size(), completes.size());
        assertTrue(partials.size() > calls.size(), "arguments arrive in pieces: " + partials);
        for (int i = 0; i < calls.size(); i++) {
            ToolExecutionRequest call = calls.get(i);
            assertEquals(i, completes.get(i).index());
            assertEquals(call, completes.get(i).toolExecutionRequest());
            StringBuilder arguments = new StringBuilder();
            for (PartialToolCall p : partials) {
                if (p.index() == i) {
                    assertEquals(call.id(), p.id());
                    assertEquals(call.name(), p.name());
                    arguments.append(p.partialArguments());
                }
            }
            assertEquals(call.arguments(), arguments.toString());
        }
        assertTrue(threads.stream().allMatch(t -> t.startsWith("llb-stream-")), threads.toString());
        assertInstanceOf(LlbTokenUsage.class, response.tokenUsage());
    }

    @Test
    void theStreamingHandleCancelsAndNothingIsCalledAfterIt() throws Exception {
        // One generation after the other: when the second completes, the first has returned entirely.
        ExecutorService oneThread = Executors.newSingleThreadExecutor();
        try (LlbStreamingChatModel sequential = LlbStreamingChatModel.builder().config(Fixtures.config(Fixtures.toolModel(dir)))
                .executor(oneThread).build()) {
            List<String> events = Collections.synchronizedList(new ArrayList<>());
            sequential.chat(forecastRequest(ToolChoice.NONE).maxOutputTokens(64).build(), new StreamingChatResponseHandler() {
                @Override
                public void onPartialResponse(PartialResponse partial, PartialResponseContext context) {
                    events.add("partial");
                    context.streamingHandle().cancel();
                    assertTrue(context.streamingHandle().isCancelled());
                }

                @Override
                public void onCompleteResponse(ChatResponse response) {
                    events.add("complete");
                }

                @Override
                public void onError(Throwable error) {
                    events.add("error " + error);
                }
            });
            CompletableFuture<ChatResponse> after = new CompletableFuture<>();
            sequential.chat(forecastRequest(ToolChoice.NONE).maxOutputTokens(2).build(), new StreamingChatResponseHandler() {
                @Override
                public void onCompleteResponse(ChatResponse response) {
                    after.complete(response);
                }

                @Override
                public void onError(Throwable error) {
                    after.completeExceptionally(error);
                }
            });
            assertEquals(FinishReason.LENGTH, after.get(60, TimeUnit.SECONDS).finishReason(), "the model stays usable");
            assertEquals(List.of("partial"), events);
        } finally {
            oneThread.shutdown();
        }
    }

    @Test
    void llbErrorsAreLangChain4jExceptionsCarryingLlbsCode() throws Exception {
        InvalidRequestException bad = assertThrows(InvalidRequestException.class,
                () -> model.chat(forecastRequest(ToolChoice.AUTO).temperature(3.0).build()));
        assertEquals("invalid_argument", assertInstanceOf(LlbException.class, bad.getCause()).code());
        assertTrue(bad.getMessage().contains("temperature"), bad.getMessage());

        String longText = "word ".repeat(3000);
        InvalidRequestException overflow = assertThrows(InvalidRequestException.class,
                () -> model.chat(ChatRequest.builder().messages(UserMessage.from(longText)).build()));
        assertEquals("context_overflow", ((LlbException) overflow.getCause()).code());

        CompletableFuture<ChatResponse> streamed = new CompletableFuture<>();
        streaming.chat(ChatRequest.builder().messages(UserMessage.from(longText)).build(), new StreamingChatResponseHandler() {
            @Override
            public void onCompleteResponse(ChatResponse response) {
                streamed.complete(response);
            }

            @Override
            public void onError(Throwable error) {
                streamed.completeExceptionally(error);
            }
        });
        Throwable streamedError = assertThrows(java.util.concurrent.ExecutionException.class,
                () -> streamed.get(60, TimeUnit.SECONDS)).getCause();
        assertEquals("context_overflow", ((LlbException) assertInstanceOf(InvalidRequestException.class, streamedError).getCause()).code());

        UnsupportedFeatureException image = assertThrows(UnsupportedFeatureException.class, () -> model.chat(ChatRequest.builder()
                .messages(UserMessage.from(TextContent.from("What is this?"), ImageContent.from("https://example.com/a.png"))).build()));
        assertTrue(image.getMessage().contains("IMAGE"), image.getMessage());
    }

    @Test
    void modelsLlbRefusesOrCannotFindFailAtBuild() {
        UnsupportedFeatureException refused = assertThrows(UnsupportedFeatureException.class,
                () -> LlbChatModel.builder().config(Fixtures.config(Fixtures.plainModel(dir))).build());
        assertEquals("tools_unsupported", ((LlbException) refused.getCause()).code());
        LangChain4jException missing = assertThrows(ModelNotFoundException.class,
                () -> LlbStreamingChatModel.builder().config(ChatConfig.of(dir.resolve("missing.gguf"))).build());
        assertEquals("file_not_found", ((LlbException) missing.getCause()).code());
    }

    @Test
    void callsFromSeveralThreadsTakeTurnsInsteadOfFailingBusy() throws Exception {
        List<CompletableFuture<ChatResponse>> results = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            results.add(CompletableFuture.supplyAsync(() -> model.chat(forecastRequest(ToolChoice.NONE).maxOutputTokens(4).build())));
        }
        for (CompletableFuture<ChatResponse> r : results) {
            assertEquals(FinishReason.LENGTH, r.get(120, TimeUnit.SECONDS).finishReason());
        }
    }
}
