package dev.llb.springai;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.llb.LlbException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.ai.chat.client.AdvisorParams;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.client.advisor.MessageChatMemoryAdvisor;
import org.springframework.ai.chat.memory.ChatMemory;
import org.springframework.ai.chat.memory.MessageWindowChatMemory;
import org.springframework.ai.chat.messages.Message;
import org.springframework.ai.chat.metadata.Usage;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.retry.NonTransientAiException;

/**
 * Provider-native structured output (llb's grammar enforces the entity's JSON schema: a
 * random-weight model's reply parses every time, where prompt-based format instructions get
 * noise) and chat memory over one pool (each turn reuses the KV cache of the turn before).
 */
class StructuredOutputAndMemoryTest {
    @TempDir
    static Path dir;

    static LlbChatModel llb;

    enum City { PARIS, TOKYO, LIMA }

    /** Bounded fields: a random-weight model never ends a free string, but ends these. */
    record Weather(City city, int temperature, boolean sunny) {}

    @BeforeAll
    static void open() {
        llb = LlbChatModel.builder().config(Fixtures.config(Fixtures.toolModel(dir)).withContextSize(4096)).parallel(2)
                .defaultOptions(LlbChatOptions.builder().temperature(0.8).maxTokens(160).build()).build();
    }

    @AfterAll
    static void close() {
        llb.close();
    }

    @Test
    void nativeStructuredOutputReturnsRecordsThatParseTwentyTimesInARow() {
        long start = System.nanoTime();
        LlbChatModelTest.Recording recording = new LlbChatModelTest.Recording(llb);
        ChatClient client = ChatClient.create(recording);
        List<Weather> seen = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            LlbChatOptions.Builder seeded = LlbChatOptions.builder().seed((long) i);
            seen.add(client.prompt().user("Weather in Paris?").options(seeded).call()
                    .entity(Weather.class, spec -> spec.useProviderStructuredOutput()));
            seen.add(client.prompt().advisors(AdvisorParams.ENABLE_NATIVE_STRUCTURED_OUTPUT).user("Weather in Lima?")
                    .options(LlbChatOptions.builder().seed(100L + i)).call().entity(Weather.class));
        }
        assertEquals(20, seen.size());
        for (Weather w : seen) {
            assertNotNull(w);
            assertNotNull(w.city(), seen.toString());
        }
        assertEquals(20, recording.prompts.size());
        for (Prompt p : recording.prompts) {
            String user = p.getUserMessage().getText();
            assertFalse(user.contains("JSON Schema") || user.contains("RFC8259"), "no format instructions: " + user);
            String schema = assertInstanceOf(LlbChatOptions.class, p.getOptions()).getOutputSchema();
            assertTrue(schema != null && schema.contains("\"temperature\""), String.valueOf(schema));
        }
        System.out.printf("20 native structured outputs: %.1f s; e.g. %s%n", (System.nanoTime() - start) / 1e9, seen.get(0));

        // The same question through prompt-based format instructions: the random weights ignore them.
        assertThrows(RuntimeException.class, () -> ChatClient.create(llb).prompt().user("Weather in Paris?")
                .options(LlbChatOptions.builder().seed(1L).maxTokens(24)).call().entity(Weather.class));
    }

    @Test
    void aSchemaLlbCannotEnforceIsRefusedNotSentUnenforced() {
        LlbChatOptions unique = LlbChatOptions.builder().outputSchema("""
                {"type":"object","properties":{"tags":{"type":"array","items":{"type":"integer"},"uniqueItems":true}}}""").build();
        NonTransientAiException e = assertThrows(NonTransientAiException.class, () -> llb.call(new Prompt("hi", unique)));
        assertTrue(e.getMessage().contains("uniqueItems") && e.getMessage().contains("$.properties.tags.uniqueItems"), e.getMessage());
        LlbChatOptions email = LlbChatOptions.builder().outputSchema("""
                {"type":"object","properties":{"to":{"type":"string","format":"email"}}}""").build();
        assertTrue(assertThrows(NonTransientAiException.class, () -> llb.stream(new Prompt("hi", email)).blockLast())
                .getMessage().contains("format: email"));
        // A schema llama.cpp's converter cannot compile: llb's own refusal, with llb's code and message.
        LlbChatOptions bad = LlbChatOptions.builder().outputSchema("""
                {"type":"object","properties":{"x":{"type":"double"}}}""").build();
        NonTransientAiException refused = assertThrows(NonTransientAiException.class, () -> llb.call(new Prompt("hi", bad)));
        assertInstanceOf(LlbException.class, refused.getCause());
        assertTrue(refused.getMessage().startsWith("llb ") && refused.getMessage().contains("double"), refused.getMessage());
    }

    @Test
    void chatMemoryTurnsReuseTheKvCacheOfTheTurnBefore() {
        long start = System.nanoTime();
        ChatMemory memory = MessageWindowChatMemory.builder().maxMessages(50).build();
        ChatClient client = ChatClient.builder(llb).defaultSystem("You are a terse assistant.")
                .defaultAdvisors(MessageChatMemoryAdvisor.builder(memory).build())
                .defaultOptions(LlbChatOptions.builder().maxTokens(12)).build();
        int previousPrompt = 0;
        for (int turn = 1; turn <= 4; turn++) {
            ChatResponse r = client.prompt().user("Turn " + turn + ": tell me more.")
                    .advisors(a -> a.param(ChatMemory.CONVERSATION_ID, "conversation-1")).call().chatResponse();
            assertNotNull(r);
            Usage usage = r.getMetadata().getUsage();
            long cached = usage.getCacheReadInputTokens();
            System.out.printf("memory turn %d: prompt %d tokens, %d of them from the KV cache%n", turn,
                    usage.getPromptTokens(), cached);
            if (turn > 1) {
                // The history up to the previous turn's reply is the prompt the pool already holds
                // (less a token where the reply's first characters merge with the one before).
                assertTrue(cached >= previousPrompt - 2, "turn " + turn + ": " + cached + " cached of " + usage.getPromptTokens()
                        + "; the previous prompt had " + previousPrompt);
            }
            previousPrompt = usage.getPromptTokens();
        }
        List<Message> history = memory.get("conversation-1");
        assertEquals(8, history.size(), "4 user and 4 assistant messages: " + history);
        System.out.printf("chat memory test: %.1f s%n", (System.nanoTime() - start) / 1e9);
    }
}
