package dev.llb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code speculative} through Java: {@link ChatConfig#withSpeculative} writes llb's object with
 * only the fields set, and {@link Speculative} refuses, naming the field, the values llb would
 * refuse. An engine opened with it speculates: the reply is the reply without speculation, and
 * its timings count the drafted and accepted tokens.
 */
class SpeculativeTest {
    @TempDir
    static Path dir;
    private static final ChatConfig CONFIG = ChatConfig.of(Path.of("model.gguf"));

    private static JsonNode written(Speculative speculative) {
        return Json.parse(CONFIG.withSpeculative(speculative).toJson()).path("speculative");
    }

    @Test
    void everyFieldIsWrittenByItsLlbName() {
        Speculative all = Speculative.DEFAULT.withType("draft-simple").withDraftMax(16).withDraftMin(2)
                .withDraftModel(Path.of("/models/draft.gguf"), 99);
        assertEquals(Json.parse("{\"type\":\"draft-simple\",\"draft_max\":16,\"draft_min\":2,"
                + "\"draft_model_path\":\"/models/draft.gguf\",\"draft_n_gpu_layers\":99}"), written(all));
        assertEquals(new Speculative("draft-simple", 16, 2, Path.of("/models/draft.gguf"), 99, null),
                CONFIG.withSpeculative(all).speculative());
        assertEquals(all, Speculative.DEFAULT.withType("draft-simple").withDraftMax(16).withDraftMin(2)
                .withDraftModel(Path.of("/models/draft.gguf")).withDraftGpuLayers(99));
    }

    @Test
    void unsetFieldsAreLeftToLlb() {
        assertEquals(Json.parse("{}"), written(Speculative.DEFAULT));
        assertEquals(Json.parse("{\"type\":\"none\"}"), written(Speculative.off()));
        assertEquals(Json.parse("{\"type\":\"ngram-mod\"}"), written(Speculative.ngram("ngram-mod")));
        assertEquals(Json.parse("{\"draft_max\":8}"), written(Speculative.DEFAULT.withDraftMax(8)));
        assertEquals(Json.parse("{\"type\":\"ngram-simple\",\"draft_min\":0}"),
                written(Speculative.ngram("ngram-simple").withDraftMin(0)));
        assertTrue(Json.parse(CONFIG.toJson()).path("speculative").isMissingNode(), CONFIG.toJson());
        assertNull(CONFIG.speculative());
        // The last one set wins, as with every option; the other config fields are untouched.
        ChatConfig twice = CONFIG.withContextSize(2048).withSpeculative(Speculative.ngram("ngram-cache"))
                .withSpeculative(Speculative.off());
        assertEquals(Speculative.off(), twice.speculative());
        assertEquals(Map.of("speculative", Map.of("type", "none")), twice.backendOptions());
        assertEquals(2048, Json.parse(twice.toJson()).path("n_ctx").asInt());
    }

    @Test
    void everyTypeLlbNamesIsTaken() {
        for (String type : Speculative.TYPES) {
            assertEquals(type, written(Speculative.DEFAULT.withType(type)).path("type").asText());
        }
        for (String type : Speculative.NGRAM_TYPES) {
            assertEquals(type, Speculative.ngram(type).type());
        }
        assertEquals(List.of("none", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
                "draft-simple", "draft-eagle3", "draft-mtp"), Speculative.TYPES);
    }

    @Test
    void theDraftSizesAtTheirBoundsAreTaken() {
        assertEquals(1, Speculative.DEFAULT.withDraftMax(1).draftMax());
        assertEquals(256, Speculative.DEFAULT.withDraftMax(256).draftMax());
        assertEquals(0, Speculative.DEFAULT.withDraftMin(0).draftMin());
        assertEquals(256, Speculative.DEFAULT.withDraftMin(256).draftMin(), "without draft_max: llb's own bound");
        assertEquals(4, Speculative.DEFAULT.withDraftMax(4).withDraftMin(4).draftMin(), "draft_min may equal draft_max");
    }

    private static void refused(String field, Supplier<Speculative> bad) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, bad::get);
        assertTrue(e.getMessage().startsWith("speculative." + field + " "), e.getMessage());
    }

    @Test
    void badValuesAreRefusedByName() {
        refused("type", () -> Speculative.DEFAULT.withType("ngram"));
        refused("type", () -> Speculative.DEFAULT.withType("NONE"));
        refused("type", () -> Speculative.DEFAULT.withType(""));
        refused("type", () -> Speculative.ngram("draft-simple"));
        refused("type", () -> Speculative.ngram("none"));
        refused("draft_max", () -> Speculative.DEFAULT.withDraftMax(0));
        refused("draft_max", () -> Speculative.DEFAULT.withDraftMax(257));
        refused("draft_max", () -> Speculative.DEFAULT.withDraftMax(-1));
        refused("draft_min", () -> Speculative.DEFAULT.withDraftMin(-1));
        refused("draft_min", () -> Speculative.DEFAULT.withDraftMin(257));
        refused("draft_min", () -> Speculative.DEFAULT.withDraftMax(4).withDraftMin(5));
        refused("draft_min", () -> Speculative.DEFAULT.withDraftMin(8).withDraftMax(4));
        refused("draft_min", () -> new Speculative(null, 2, 3, null, null, null));
        assertThrows(NullPointerException.class, () -> CONFIG.withSpeculative(null));
        // Set as a raw option, the bad value reaches llb (which refuses it); reading it back names it.
        ChatConfig raw = CONFIG.withOption("speculative", Map.of("draft_max", 0));
        assertEquals(Json.parse("{\"draft_max\":0}"), Json.parse(raw.toJson()).path("speculative"));
        refused("draft_max", raw::speculative);
    }

    @Test
    void anEngineSpeculatesAndRepliesAsWithout() {
        ChatConfig config = Fixtures.config(Fixtures.toolModel(dir))
                .withSpeculative(Speculative.ngram("ngram-mod").withNgramSize(4).withDraftMax(8));
        try (ChatEngine engine = ChatEngine.open(config)) {
            JsonNode on = Json.parse(engine.infer(request(true)));
            JsonNode off = Json.parse(engine.infer(request(false)));
            assertEquals(off.path("choices").path(0).path("message").path("content"),
                    on.path("choices").path(0).path("message").path("content"), on.toString());
            assertTrue(on.path("timings").path("draft_accepted_n").asInt(-1) > 0, "drafts were accepted: " + on);
            assertEquals(0, off.path("timings").path("draft_n").asInt(-1), off.toString());
        }
        LlbException e = assertThrows(LlbException.class,
                () -> ChatEngine.open(Fixtures.config(Fixtures.toolModel(dir)).withSpeculative(Speculative.ngram("ngram-mod")
                        .withDraftModel(Path.of("/m.gguf")))).close());
        assertEquals("invalid_argument", e.code(), e.getMessage());
        assertTrue(e.getMessage().contains("speculative.draft_model_path"), e.getMessage());
    }

    @Test
    void aDraftModelOfTheSameVocabularyDraftsAndOneOfAnotherIsRefused() {
        Path model = Fixtures.toolModel(dir);
        ChatConfig config = Fixtures.config(model).withSpeculative(Speculative.draftModel(model).withDraftMax(6));
        assertEquals(Json.parse("{\"type\":\"draft-simple\",\"draft_model_path\":" + Json.MAPPER.valueToTree(model.toString())
                + ",\"draft_max\":6}"), Json.parse(config.toJson()).path("speculative"));
        try (ChatEngine engine = ChatEngine.open(config)) {
            JsonNode on = Json.parse(engine.infer(request(true)));
            JsonNode off = Json.parse(engine.infer(request(false)));
            assertEquals(off.path("choices").path(0).path("message").path("content"),
                    on.path("choices").path(0).path("message").path("content"), on.toString());
            assertTrue(on.path("timings").path("draft_accepted_n").asInt(-1) > 0, "the draft model's drafts were accepted: " + on);
        }
        LlbException e = assertThrows(LlbException.class, () -> ChatEngine.open(Fixtures.config(model)
                .withSpeculative(Speculative.draftModel(Fixtures.otherVocabularyModel(dir)))).close());
        assertEquals("invalid_argument", e.code(), e.getMessage());
        assertTrue(e.getMessage().contains("vocab"), e.getMessage());
    }

    private static String request(boolean speculative) {
        return Json.MAPPER.valueToTree(Map.of("messages", List.of(Map.of("role", "user", "content", "Repeat: a b c a b c")),
                "tool_choice", "none", "max_tokens", 100, "temperature", 0, "speculative", speculative)).toString();
    }
}
