package dev.llb;

import java.nio.file.Path;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Speculative decoding of an engine or pool ({@code speculative}, docs/design.md, "Speculative
 * decoding"): a drafter guesses the next tokens, and the model checks the whole guess in one batch
 * and keeps the drafted tokens it would have generated itself. The n-gram drafters
 * ({@code ngram-*}) guess from the tokens of the conversation itself (text the reply copies: code
 * under edit, quoted documents, JSON); {@code draft-simple} drafts with a second, smaller model
 * of the same vocabulary ({@code draft_model_path}, {@link #draftModel}; llb refuses at open one
 * whose vocabulary differs), and llb refuses by name the types it does not run
 * ({@code draft-eagle3}, {@code draft-mtp}). A completion
 * reports {@code timings.draft_n} (tokens drafted) and {@code timings.draft_accepted_n} (of those,
 * the tokens the model accepted). A request's {@code "speculative": false} (or {@code true})
 * overrides the config for that request.
 *
 * <p>Set with {@link ChatConfig#withSpeculative}; unset ({@code null}) values take llb's
 * defaults (llb picks the default type and draft sizes; Java writes none of its own). The
 * constructor refuses, with an {@link IllegalArgumentException} naming the field, what llb would
 * refuse with {@code invalid_argument}: an unknown type, a {@code draft_max} outside 1 to 256, a
 * {@code draft_min} below 0 or above {@code draft_max}. llb checks the rest (whether a type needs
 * or takes a draft model) when the engine or pool opens.
 *
 * <pre>{@code
 * ChatConfig.of(gguf).withSpeculative(Speculative.ngram("ngram-mod").withDraftMax(32))
 * ChatConfig.of(gguf).withSpeculative(Speculative.off())   // requests may still ask with "speculative": true
 * }</pre>
 *
 * @param type the drafter by llama.cpp's name ({@code type}): one of {@link #TYPES};
 *     {@code "none"} turns speculation off unless a request asks for it
 * @param draftMax the most tokens one draft holds ({@code draft_max}, 1 to 256)
 * @param draftMin the fewest tokens a draft must hold to be checked ({@code draft_min}, 0 to
 *     {@code draft_max})
 * @param draftModelPath the draft model's GGUF file, for the {@code draft-*} types
 *     ({@code draft_model_path})
 * @param draftGpuLayers layers of the draft model offloaded to GPUs ({@code draft_n_gpu_layers};
 *     -1: all)
 * @param ngramSize the n-gram the n-gram drafters look up, in tokens ({@code ngram_size})
 */
public record Speculative(String type, Integer draftMax, Integer draftMin, Path draftModelPath, Integer draftGpuLayers,
        Integer ngramSize) {

    /** The drafters that guess from the conversation's own tokens, by llama.cpp's names. */
    public static final List<String> NGRAM_TYPES =
            List.of("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache");

    /** Every {@code type} llb takes: {@code "none"}, the {@link #NGRAM_TYPES}, and the draft-model types. */
    public static final List<String> TYPES = List.of("none", "ngram-simple", "ngram-map-k", "ngram-map-k4v",
            "ngram-mod", "ngram-cache", "draft-simple", "draft-eagle3", "draft-mtp");

    /** The most {@code draft_max} llb takes. */
    public static final int MAX_DRAFT = 256;

    /** llb's defaults for every field: an empty {@code speculative} object. */
    public static final Speculative DEFAULT = new Speculative(null, null, null, null, null, null);

    /** Checks the type and the draft sizes as llb does. */
    public Speculative {
        if (type != null && !TYPES.contains(type)) {
            throw new IllegalArgumentException("speculative.type must be one of " + TYPES + ", not \"" + type + "\"");
        }
        if (draftMax != null && (draftMax < 1 || draftMax > MAX_DRAFT)) {
            throw new IllegalArgumentException("speculative.draft_max must be 1 to " + MAX_DRAFT + ", not " + draftMax);
        }
        if (ngramSize != null && (ngramSize < 1 || ngramSize > 1024)) {
            throw new IllegalArgumentException("speculative.ngram_size must be 1 to 1024, not " + ngramSize);
        }
        int minCeiling = draftMax != null ? draftMax : MAX_DRAFT;
        if (draftMin != null && (draftMin < 0 || draftMin > minCeiling)) {
            throw new IllegalArgumentException("speculative.draft_min must be 0 to "
                    + (draftMax != null ? "draft_max (" + draftMax + ")" : String.valueOf(MAX_DRAFT)) + ", not " + draftMin);
        }
    }

    /**
     * No speculation ({@code type} {@code "none"}): requests decode one token at a time unless one
     * sends {@code "speculative": true}.
     *
     * @return the settings
     */
    public static Speculative off() {
        return DEFAULT.withType("none");
    }

    /**
     * The n-gram the n-gram drafters look up, in tokens ({@code ngram_size}, 1 to 1024;
     * llama-server's {@code --spec-ngram-*-size-n}); llb's default when unset.
     *
     * @param tokens the n-gram's length
     * @return a copy with {@code ngram_size} set
     */
    public Speculative withNgramSize(int tokens) {
        return new Speculative(type, draftMax, draftMin, draftModelPath, draftGpuLayers, tokens);
    }

    /**
     * An n-gram drafter, with llb's default draft sizes.
     *
     * @param type one of {@link #NGRAM_TYPES}
     * @return the settings
     * @throws IllegalArgumentException for any other type
     */
    public static Speculative ngram(String type) {
        if (!NGRAM_TYPES.contains(type)) {
            throw new IllegalArgumentException("speculative.type must be an n-gram drafter " + NGRAM_TYPES + ", not \""
                    + type + "\"");
        }
        return DEFAULT.withType(type);
    }

    /**
     * {@code draft-simple}: {@code gguf}, a smaller model of the same vocabulary, drafts (its layers
     * on the GPU as many as the model's), with llb's default draft sizes.
     *
     * @param gguf the draft model's GGUF file
     * @return the settings
     */
    public static Speculative draftModel(Path gguf) {
        return DEFAULT.withType("draft-simple").withDraftModel(gguf);
    }

    /**
     * Sets {@code type}.
     *
     * @param drafter one of {@link #TYPES}
     * @return a copy with it set
     */
    public Speculative withType(String drafter) {
        return new Speculative(drafter, draftMax, draftMin, draftModelPath, draftGpuLayers, ngramSize);
    }

    /**
     * Sets {@code draft_max}: the most tokens one draft holds. Longer drafts gain more when the
     * model accepts them and cost more when it does not.
     *
     * @param tokens 1 to 256
     * @return a copy with it set
     */
    public Speculative withDraftMax(int tokens) {
        return new Speculative(type, tokens, draftMin, draftModelPath, draftGpuLayers, ngramSize);
    }

    /**
     * Sets {@code draft_min}: a shorter draft is not checked (its batch would cost more than it
     * saves).
     *
     * @param tokens 0 to {@code draft_max}
     * @return a copy with it set
     */
    public Speculative withDraftMin(int tokens) {
        return new Speculative(type, draftMax, tokens, draftModelPath, draftGpuLayers, ngramSize);
    }

    /**
     * Sets {@code draft_model_path}: the draft model of the {@code draft-*} types (it must share
     * the model's vocabulary).
     *
     * @param gguf the draft model's GGUF file
     * @return a copy with it set
     */
    public Speculative withDraftModel(Path gguf) {
        return new Speculative(type, draftMax, draftMin, gguf, draftGpuLayers, ngramSize);
    }

    /**
     * Sets {@code draft_model_path} and {@code draft_n_gpu_layers}.
     *
     * @param gguf the draft model's GGUF file
     * @param nGpuLayers its layers offloaded to GPUs (-1: all)
     * @return a copy with them set
     */
    public Speculative withDraftModel(Path gguf, int nGpuLayers) {
        return new Speculative(type, draftMax, draftMin, gguf, nGpuLayers, ngramSize);
    }

    /**
     * Sets {@code draft_n_gpu_layers}.
     *
     * @param nGpuLayers the draft model's layers offloaded to GPUs (-1: all)
     * @return a copy with it set
     */
    public Speculative withDraftGpuLayers(int nGpuLayers) {
        return new Speculative(type, draftMax, draftMin, draftModelPath, nGpuLayers, ngramSize);
    }

    /** The {@code speculative} object of llb's config; unset fields are left out. */
    Map<String, Object> toMap() {
        Map<String, Object> m = new LinkedHashMap<>();
        if (type != null) {
            m.put("type", type);
        }
        if (draftMax != null) {
            m.put("draft_max", draftMax);
        }
        if (draftMin != null) {
            m.put("draft_min", draftMin);
        }
        if (draftModelPath != null) {
            m.put("draft_model_path", draftModelPath.toString());
        }
        if (draftGpuLayers != null) {
            m.put("draft_n_gpu_layers", draftGpuLayers);
        }
        if (ngramSize != null) {
            m.put("ngram_size", ngramSize);
        }
        return Collections.unmodifiableMap(m);
    }

    /** The settings of a {@code speculative} object (as {@link #toMap} writes it), or null when it is none. */
    static Speculative fromMap(Object value) {
        if (!(value instanceof Map<?, ?> m)) {
            return null;
        }
        return new Speculative(m.get("type") instanceof String s ? s : null, integer(m.get("draft_max")),
                integer(m.get("draft_min")), m.get("draft_model_path") instanceof String s ? Path.of(s) : null,
                integer(m.get("draft_n_gpu_layers")), integer(m.get("ngram_size")));
    }

    private static Integer integer(Object value) {
        return value instanceof Number n ? n.intValue() : null;
    }
}
