package dev.llb.langchain4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import dev.langchain4j.data.message.UserMessage;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.request.ChatRequestParameters;
import dev.langchain4j.model.chat.request.DefaultChatRequestParameters;
import dev.langchain4j.model.chat.request.ResponseFormat;
import dev.langchain4j.model.chat.request.ResponseFormatType;
import dev.langchain4j.model.chat.request.json.JsonObjectSchema;
import dev.langchain4j.model.chat.request.json.JsonSchema;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link LlbChatRequestParameters}: llb's options per request, merged with the model's defaults as
 * LangChain4j merges its providers' parameters; the builders' shortcuts.
 */
class RequestParametersTest {
    @TempDir
    static Path dir;

    @Test
    void aRequestsOwnSeedReachesLlb() {
        // Random weights are peaky (llb's min_p keeps one token): a JSON schema's grammar leaves
        // several, and sampling hot from them, the seed decides.
        try (LlbChatModel seeded1 = hot(LlbChatModel.builder().seed(1L))) {
            String byModel = seeded1.chat(request(null)).aiMessage().text();
            Long seed = null;
            String bySeed = null;
            for (long s = 2; s <= 20 && seed == null; s++) {
                String reply = seeded1.chat(request(s)).aiMessage().text();
                if (!reply.equals(byModel)) {
                    seed = s;
                    bySeed = reply;
                }
            }
            assertNotNull(seed, "no request seed of 2 to 20 changed the reply: the request's seed does not reach llb");
            assertEquals(bySeed, seeded1.chat(request(seed)).aiMessage().text(), "the same seed samples the same reply");
            try (LlbChatModel seededThere = hot(LlbChatModel.builder().seed(seed))) {
                assertEquals(bySeed, seededThere.chat(request(null)).aiMessage().text(),
                        "a request's seed samples what the same seed on the model does");
            }
            // A request with plain LangChain4j parameters keeps the model's llb fields (its seed).
            ChatRequest plain = ChatRequest.builder().messages(UserMessage.from("Tell a story.")).temperature(2.0).build();
            assertEquals(byModel, seeded1.chat(plain).aiMessage().text());
        }
    }

    private static LlbChatModel hot(LlbChatModel.Builder builder) {
        ResponseFormat number = ResponseFormat.builder().type(ResponseFormatType.JSON).jsonSchema(JsonSchema.builder()
                .name("r").rootElement(JsonObjectSchema.builder().addIntegerProperty("n").required("n").build()).build()).build();
        return builder.config(Fixtures.config(Fixtures.toolModel(dir))).parallel(1).temperature(2.0).topK(0).topP(1.0)
                .maxTokens(24).responseFormat(number).build();
    }

    private static ChatRequest request(Long seed) {
        return ChatRequest.builder().messages(UserMessage.from("Tell a story."))
                .parameters(LlbChatRequestParameters.builder().seed(seed).build()).build();
    }

    @Test
    void parametersMergeFieldByField() {
        LlbChatRequestParameters defaults = LlbChatRequestParameters.builder().temperature(0.2).seed(3L).reasoningBudget(0)
                .speculative(true).parallelToolCalls(false).build();
        ChatRequestParameters plain = DefaultChatRequestParameters.builder().temperature(0.9).maxOutputTokens(5).build();
        LlbChatRequestParameters merged = assertInstanceOf(LlbChatRequestParameters.class, defaults.overrideWith(plain));
        assertEquals(0.9, merged.temperature());
        assertEquals(5, merged.maxOutputTokens());
        assertEquals(3L, merged.seed());
        assertEquals(0, merged.reasoningBudget());
        assertEquals(true, merged.speculative());
        LlbChatRequestParameters own = defaults.overrideWith(LlbChatRequestParameters.builder().seed(9L).speculative(false).build());
        assertEquals(9L, own.seed());
        assertEquals(false, own.speculative());
        assertEquals(false, own.parallelToolCalls());
        assertEquals(0.2, own.temperature());
        assertEquals(own, LlbChatRequestParameters.builder().seed(9L).speculative(false).build().defaultedBy(defaults));
    }

    @Test
    void builderShortcutsAreDefaultParametersAndWinOverTheGivenOnes() {
        LlbChatRequestParameters d = LlbStreamingChatModel.builder()
                .defaultRequestParameters(DefaultChatRequestParameters.builder().temperature(0.9).topK(5).build())
                .temperature(0.1).topP(0.8).maxTokens(33).stop(List.of("END")).seed(4L).reasoningBudget(16)
                .frequencyPenalty(0.5).presencePenalty(0.25).defaults();
        assertEquals(0.1, d.temperature());
        assertEquals(5, d.topK());
        assertEquals(0.8, d.topP());
        assertEquals(33, d.maxOutputTokens());
        assertEquals(List.of("END"), d.stopSequences());
        assertEquals(4L, d.seed());
        assertEquals(16, d.reasoningBudget());
        assertEquals(0.5, d.frequencyPenalty());
        assertEquals(0.25, d.presencePenalty());
    }
}
