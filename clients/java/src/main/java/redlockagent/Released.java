package redlockagent;

/**
 * The answer to a release.
 *
 * @param released true when a quorum still held the lock; false when it had
 *     run out already (the work may have overlapped another holder's), or
 *     when {@code holdCount > 0}: a re-entered lock still held
 * @param holdCount the releases a re-entered lock still takes; 0 once released
 */
public record Released(boolean released, int holdCount) {
}
