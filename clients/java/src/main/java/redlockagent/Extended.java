package redlockagent;

import java.time.Duration;

/**
 * The answer to an extend: valid for {@code validity} from when it came.
 *
 * @param validity how long the lock is safe to use, from the answer
 * @param ttl the TTL it was given
 */
public record Extended(Duration validity, Duration ttl) {
}
