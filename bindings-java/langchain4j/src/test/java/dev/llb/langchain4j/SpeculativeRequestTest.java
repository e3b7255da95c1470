package dev.llb.langchain4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.langchain4j.data.message.UserMessage;
import dev.langchain4j.model.chat.request.ChatRequest;
import org.junit.jupiter.api.Test;

/**
 * The builders' {@code speculative(Boolean)}: llb's request field {@code speculative} on every
 * request of the model, left out when unset (the engine's config decides). No native code: the
 * engine's own settings ride on the {@code ChatConfig} ({@code withSpeculative}, tested in the
 * binding).
 */
class SpeculativeRequestTest {
    private static final ChatRequest REQUEST = ChatRequest.builder().messages(UserMessage.from("Hi")).build();

    private static JsonNode sent(LlbModelBuilder<?, ?> builder) {
        ChatRequest merged = ChatRequest.builder().messages(REQUEST.messages())
                .parameters(builder.defaults().overrideWith(REQUEST.parameters())).build();
        return Mapping.parse(Mapping.request(merged, builder.style()));
    }

    @Test
    void bothBuildersSendTheSwitchOnEveryRequest() {
        assertEquals(false, sent(LlbChatModel.builder().speculative(false)).path("speculative").asBoolean(true));
        assertEquals(true, sent(LlbChatModel.builder().speculative(true)).path("speculative").asBoolean(false));
        assertEquals(false, sent(LlbStreamingChatModel.builder().speculative(false)).path("speculative").asBoolean(true));
        assertEquals(true, sent(LlbStreamingChatModel.builder().seed(3L).speculative(true).reasoningBudget(0))
                .path("speculative").asBoolean(false));
    }

    @Test
    void unsetItIsLeftOut() {
        assertTrue(sent(LlbChatModel.builder()).path("speculative").isMissingNode());
        assertTrue(sent(LlbStreamingChatModel.builder().speculative(true).speculative(null)).path("speculative").isMissingNode());
    }
}
