# syntax=docker/dockerfile:1
#
# The redlock-agent image: the agent (entrypoint) and its admin TUI.
#
#   docker build -t redlock-agent:0.1.0 .
#   docker run --rm redlock-agent:0.1.0 check --offline --config /etc/redlock/config.yaml
#   (without --offline, check also connects to every master it lists)
#
# Runs as uid/gid 65532 on a read-only root filesystem; the Helm chart
# (helm/redlock-agent) mounts the config at /etc/redlock/config.yaml and the
# socket directory at /run/redlock.

# At least the newest rust-version among the locked dependencies.
ARG RUST_VERSION=1.89

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p redlock-agent -p redlock-tui \
    && install -D -m 0755 -t /out target/release/redlock-agent target/release/redlock-tui

# glibc, libgcc, CA certificates and tzdata; no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/redlock-agent"]
CMD ["--config", "/etc/redlock/config.yaml"]
