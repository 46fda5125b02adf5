# Build stage: compile a release binary.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates/core/Cargo.toml crates/core/
COPY crates/wire/Cargo.toml crates/wire/
COPY crates/store/Cargo.toml crates/store/
COPY crates/summarize/Cargo.toml crates/summarize/
# Dependencies in their own layer: built against stub sources, so a change
# to the sources rebuilds only foldgate's own packages.
RUN mkdir -p src benches \
    && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && for c in crates/*/; do mkdir -p "$c/src" && touch "$c/src/lib.rs"; done \
    && for b in $(awk '/^\[\[bench\]\]/ { getline; gsub(/name = |"/, ""); print }' Cargo.toml); do \
         echo 'fn main() {}' > "benches/$b.rs"; done \
    && cargo build --release --locked --bin foldgate \
    && rm -rf src benches crates/*/src target/release/.fingerprint/foldgate* target/release/deps/*foldgate*
COPY crates ./crates
COPY src ./src
COPY benches ./benches
RUN cargo build --release --locked --bin foldgate

# Runtime stage: a slim image with the binary, its default config and a non-root user.
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/foldgate --create-home foldgate
COPY --from=build /src/target/release/foldgate /usr/local/bin/foldgate
COPY config.toml /etc/foldgate/config.toml
USER foldgate
WORKDIR /var/lib/foldgate
# State (foldgate.db), archive and spool live here with the default config:
# mount a volume to keep summaries and archived messages across containers.
VOLUME /var/lib/foldgate
# Listen on every interface inside the container; override any key with
# FOLDGATE_* variables or mount another file over /etc/foldgate/config.toml.
# MIMALLOC_ALLOW_THP=0: no transparent huge pages for foldgate's heap even on
# hosts that use them for everything (the build already stops asking for
# them; the measurement: git log -p -S"Transparent huge pages" -- docs/).
ENV FOLDGATE_SERVER__LISTEN=0.0.0.0:8080 FOLDGATE_LOG=info MIMALLOC_ALLOW_THP=0
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=5s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8080/foldgate/health || exit 1
ENTRYPOINT ["foldgate"]
CMD ["serve", "--config", "/etc/foldgate/config.toml"]
