package dev.llb.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.llb.ChatConfig;
import dev.llb.PromptCache;
import dev.llb.Speculative;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The example server's {@code --speculative-type} and {@code --draft-*} flags: parsed into llb's
 * {@code speculative} object of the pool's config, only the fields given, and bad values refused
 * naming the flag before llb is called. No native code.
 */
class SpeculativeFlagsTest {
    private static OpenAiServer.Options parse(String... flags) {
        List<String> args = new ArrayList<>(List.of("--model", "m.gguf", "--port", "0"));
        args.addAll(List.of(flags));
        return OpenAiServer.Options.parse(args.toArray(String[]::new));
    }

    @Test
    void theFlagsAreLlbsSpeculativeObject() {
        OpenAiServer.Options all = parse("--speculative-type", "draft-simple", "--draft-max", "24", "--draft-min", "3",
                "--draft-model", "/models/draft.gguf", "--draft-n-gpu-layers", "-1");
        assertEquals(new Speculative("draft-simple", 24, 3, Path.of("/models/draft.gguf"), -1, null), all.speculative());
        assertEquals(Map.of("speculative", Map.of("type", "draft-simple", "draft_max", 24, "draft_min", 3,
                "draft_model_path", "/models/draft.gguf", "draft_n_gpu_layers", -1)), all.config().backendOptions());

        // Only the flags given: llb picks the rest.
        assertEquals(Speculative.off(), parse("--speculative-type", "none").speculative());
        assertEquals(Map.of("speculative", Map.of("draft_max", 8)), parse("--draft-max", "8").config().backendOptions());
        assertEquals(Speculative.ngram("ngram-map-k4v").withDraftMin(0),
                parse("--draft-min", "0", "--speculative-type", "ngram-map-k4v").speculative());
    }

    @Test
    void noFlagLeavesItToLlb() {
        OpenAiServer.Options none = parse();
        assertNull(none.speculative());
        assertNull(none.config().speculative());
        assertEquals(Map.of(), none.config().backendOptions());
    }

    @Test
    void theOtherFlagsStillReachTheConfig() {
        ChatConfig config = parse("--ctx", "2048", "--threads", "2", "--adaptive-threads", "false", "--thread-poll", "10",
                "--reasoning-budget", "0", "--prompt-cache-dir", "cache", "--speculative-type", "ngram-mod").config();
        assertEquals(2048, config.contextSize());
        assertEquals(2, config.threads());
        assertEquals(Map.of("adaptive_threads", false, "thread_poll", 10, "reasoning_budget", 0,
                "prompt_cache", Map.of("dir", "cache"), "speculative", Map.of("type", "ngram-mod")), config.backendOptions());
        assertEquals(PromptCache.onDisk(Path.of("cache")), config.promptCache());
    }

    @Test
    void badValuesAreRefusedNamingTheFlag() {
        for (String[] bad : List.of(new String[] {"--speculative-type", "ngram"}, new String[] {"--draft-max", "0"},
                new String[] {"--draft-max", "257"}, new String[] {"--draft-min", "-1"},
                new String[] {"--draft-max", "sixteen"}, new String[] {"--draft-n-gpu-layers", "all"})) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> parse(bad));
            assertTrue(e.getMessage().startsWith(bad[0] + " " + bad[1] + ": "), e.getMessage());
        }
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> parse("--draft-max", "4", "--draft-min", "5"));
        assertTrue(e.getMessage().contains("speculative.draft_min must be 0 to draft_max (4), not 5"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> parse("--draft-model"), "a flag needs a value");
    }
}
