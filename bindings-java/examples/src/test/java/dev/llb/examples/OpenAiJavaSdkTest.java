package dev.llb.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.openai.client.OpenAIClient;
import com.openai.client.okhttp.OpenAIOkHttpClient;
import com.openai.core.JsonValue;
import com.openai.core.http.StreamResponse;
import com.openai.errors.BadRequestException;
import com.openai.helpers.ChatCompletionAccumulator;
import com.openai.models.FunctionDefinition;
import com.openai.models.FunctionParameters;
import com.openai.models.ReasoningEffort;
import com.openai.models.chat.completions.ChatCompletion;
import com.openai.models.chat.completions.ChatCompletionChunk;
import com.openai.models.chat.completions.ChatCompletionContentPart;
import com.openai.models.chat.completions.ChatCompletionContentPartImage;
import com.openai.models.chat.completions.ChatCompletionContentPartText;
import com.openai.models.chat.completions.ChatCompletionCreateParams;
import com.openai.models.chat.completions.ChatCompletionFunctionTool;
import com.openai.models.chat.completions.ChatCompletionMessageFunctionToolCall;
import com.openai.models.chat.completions.ChatCompletionNamedToolChoice;
import com.openai.models.chat.completions.ChatCompletionStreamOptions;
import com.openai.models.chat.completions.ChatCompletionTokenLogprob;
import com.openai.models.chat.completions.ChatCompletionToolChoiceOption;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The example server driven by the official OpenAI Java SDK ({@code com.openai:openai-java}):
 * tool calls with tool_choice required and named, plain and streamed (the SDK's own
 * accumulator), with the request fields the SDK sends (penalties, logit_bias, logprobs,
 * reasoning_effort, store, metadata, service_tier, ...), and an image part refused by name.
 */
class OpenAiJavaSdkTest {
    private static final ObjectMapper MAPPER = new ObjectMapper();

    @TempDir
    static Path dir;

    @Test
    void theOfficialJavaSdkGetsToolCallsAndLogprobs() throws Exception {
        Path model = Processes.fixture(dir, "tools.gguf", "Qwen-Qwen2.5-7B-Instruct");
        try (ServerProcess server = ServerProcess.start(model, dir)) {
            OpenAIClient client = OpenAIOkHttpClient.builder().baseUrl(server.baseUrl).apiKey("unused").maxRetries(0).build();
            try {
                for (boolean named : new boolean[] {false, true}) {
                    ChatCompletion plain = client.chat().completions().create(params(named).build());
                    checkCompletion(plain, named);

                    ChatCompletionAccumulator acc = ChatCompletionAccumulator.create();
                    ChatCompletionCreateParams streamed = params(named)
                            .streamOptions(ChatCompletionStreamOptions.builder().includeUsage(true).build()).build();
                    try (StreamResponse<ChatCompletionChunk> chunks = client.chat().completions().createStreaming(streamed)) {
                        chunks.stream().forEach(acc::accumulate);
                    }
                    checkCompletion(acc.chatCompletion(), named);
                }
                BadRequestException e = assertThrows(BadRequestException.class, () -> client.chat().completions().create(
                        ChatCompletionCreateParams.builder().model("any").addUserMessageOfArrayOfContentParts(List.of(
                                ChatCompletionContentPart.ofText(ChatCompletionContentPartText.builder().text("What is it?").build()),
                                ChatCompletionContentPart.ofImageUrl(ChatCompletionContentPartImage.builder().imageUrl(
                                        ChatCompletionContentPartImage.ImageUrl.builder().url("data:image/png;base64,AAAA").build())
                                        .build()))).build()));
                assertEquals(400, e.statusCode());
                assertEquals("messages[0].content[1]", e.param().orElse(null), e.getMessage());
            } finally {
                client.close();
            }
        }
    }

    @SuppressWarnings("deprecation") // seed and user: deprecated by OpenAI, still sent by SDKs
    private static ChatCompletionCreateParams.Builder params(boolean named) {
        ChatCompletionCreateParams.Builder b = ChatCompletionCreateParams.builder()
                .model("any-name")
                .addUserMessage("What is the weather in Paris for the next 3 days?")
                .addTool(weatherTool())
                .parallelToolCalls(false)
                .maxCompletionTokens(64)
                .seed(7)
                .frequencyPenalty(0.5)
                .presencePenalty(0.3)
                .logitBias(ChatCompletionCreateParams.LogitBias.builder().putAdditionalProperty("0", JsonValue.from(2)).build())
                .logprobs(true)
                .topLogprobs(3)
                .reasoningEffort(ReasoningEffort.LOW)
                .store(false)
                .metadata(ChatCompletionCreateParams.Metadata.builder().putAdditionalProperty("check", JsonValue.from("java")).build())
                .serviceTier(ChatCompletionCreateParams.ServiceTier.AUTO)
                .promptCacheKey("conv-1")
                .safetyIdentifier("user-hash")
                .user("u1")
                .modalities(List.of(ChatCompletionCreateParams.Modality.TEXT));
        if (named) {
            return b.toolChoice(ChatCompletionNamedToolChoice.builder()
                    .function(ChatCompletionNamedToolChoice.Function.builder().name("get_weather").build()).build());
        }
        return b.toolChoice(ChatCompletionToolChoiceOption.Auto.REQUIRED);
    }

    private static ChatCompletionFunctionTool weatherTool() {
        Map<String, Object> schema = Map.of(
                "type", "object",
                "properties", Map.of(
                        "city", Map.of("type", "string", "enum", List.of("Paris", "Tokyo", "Lima")),
                        "days", Map.of("type", "integer", "minimum", 1, "maximum", 7)),
                "required", List.of("city", "days"),
                "additionalProperties", false);
        FunctionParameters.Builder parameters = FunctionParameters.builder();
        schema.forEach((k, v) -> parameters.putAdditionalProperty(k, JsonValue.from(v)));
        return ChatCompletionFunctionTool.builder().function(FunctionDefinition.builder()
                .name("get_weather").description("Weather forecast for a city").parameters(parameters.build()).build()).build();
    }

    /** One schema-valid get_weather call, and sane logprobs, as the SDK parsed them. */
    private static void checkCompletion(ChatCompletion completion, boolean named) throws Exception {
        ChatCompletion.Choice choice = completion.choices().get(0);
        assertEquals(ChatCompletion.Choice.FinishReason.TOOL_CALLS, choice.finishReason(), completion::toString);
        var calls = choice.message().toolCalls().orElseThrow();
        assertEquals(1, calls.size(), completion::toString);
        ChatCompletionMessageFunctionToolCall call = calls.get(0).function().orElseThrow();
        assertTrue(call.id().startsWith("call_"), call::toString);
        assertEquals("get_weather", call.function().name(), call::toString);
        JsonNode args = MAPPER.readTree(call.function().arguments());
        assertTrue(List.of("Paris", "Tokyo", "Lima").contains(args.path("city").asText()), args::toString);
        assertTrue(args.path("days").isInt() && args.path("days").asInt() >= 1 && args.path("days").asInt() <= 7, args::toString);

        List<ChatCompletionTokenLogprob> entries = choice.logprobs().orElseThrow().content().orElseThrow();
        assertFalse(entries.isEmpty(), completion::toString);
        long completionTokens = completion.usage().orElseThrow().completionTokens();
        assertTrue(entries.size() <= completionTokens, () -> entries.size() + " > " + completionTokens);
        for (ChatCompletionTokenLogprob entry : entries) {
            assertTrue(entry.logprob() <= 0, entry::toString);
            List<ChatCompletionTokenLogprob.TopLogprob> top = entry.topLogprobs();
            assertEquals(3, top.size(), entry::toString);
            for (int i = 1; i < top.size(); i++) {
                assertTrue(top.get(i - 1).logprob() >= top.get(i).logprob(), entry::toString);
            }
            assertTrue(entry.logprob() <= top.get(0).logprob() + 1e-6, entry::toString);
        }
    }
}
