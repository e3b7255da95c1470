package dev.llb;

/**
 * Hears a {@link Llb#pull(String, PullOptions)} as it goes, on the thread that called it. Whatever
 * it throws cancels the pull and is rethrown from {@code pull} (the partial file stays resumable).
 */
@FunctionalInterface
public interface PullListener {
    /**
     * One event of the pull.
     *
     * @param event {@link PullEvent.Resolved}, then {@link PullEvent.Progress}es; {@link PullEvent.Warning}s any time
     */
    void onEvent(PullEvent event);
}
