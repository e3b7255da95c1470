package dev.llb.langchain4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import dev.langchain4j.data.message.UserMessage;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.request.ChatRequestParameters;
import dev.langchain4j.model.chat.request.DefaultChatRequestParameters;
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
        try (LlbChatModel seeded7 = LlbChatModel.builder().config(Fixtures.config(Fixtures.toolModel(dir))).parallel(1)
                .temperature(1.0).maxTokens(24).seed(7L).build();
                LlbChatModel seeded1 = LlbChatModel.builder().config(Fixtures.config(Fixtures.toolModel(dir))).parallel(1)
                        .temperature(1.0).maxTokens(24).seed(1L).build()) {
            String byModel7 = seeded7.chat(request(null)).aiMessage().text();
            String byModel1 = seeded1.chat(request(null)).aiMessage().text();
            assertNotEquals(byModel7, byModel1, "different seeds sample different replies at temperature 1");
            // The request's seed wins over the model's: seed 7 on the model seeded 1 samples what seed 7 does.
            assertEquals(byModel7, seeded1.chat(request(7L)).aiMessage().text());
            // A request with plain LangChain4j parameters keeps the model's llb fields (its seed).
            ChatRequest plain = ChatRequest.builder().messages(UserMessage.from("Tell a story.")).temperature(1.0).build();
            assertEquals(byModel1, seeded1.chat(plain).aiMessage().text());
        }
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
