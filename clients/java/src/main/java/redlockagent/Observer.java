package redlockagent;

import java.io.IOException;
import java.util.Map;
import java.util.Optional;
import java.util.function.Consumer;

/**
 * Follows an election's leader: the listener gets the leader when observing
 * starts, then every change (empty: nobody leads), on the observer's
 * thread, until {@link #close()}.
 */
public final class Observer implements AutoCloseable {
    private final Http http;
    private volatile boolean closed;

    Observer(String election, Http http, Consumer<Optional<Leader>> listener) {
        this.http = http;
        Thread reader = new Thread(() -> read(listener), "redlock-observe " + election);
        reader.setDaemon(true);
        reader.start();
    }

    private void read(Consumer<Optional<Leader>> listener) {
        try {
            for (String line = http.readLine(); line != null && !closed; line = http.readLine()) {
                if (line.isBlank()) {
                    continue;
                }
                Map<String, Object> event = Json.parseObject(line);
                if ("leader".equals(Json.string(event, "event"))) {
                    listener.accept(Optional.of(Leader.of(event)));
                } else {
                    listener.accept(Optional.empty());
                }
            }
        } catch (IOException | IllegalArgumentException e) {
            // The observation ends; close() causes this too.
        } finally {
            http.close();
        }
    }

    @Override
    public void close() {
        closed = true;
        http.close();
    }
}
