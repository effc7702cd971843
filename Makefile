.PHONY: test bench fuzz

# The whole suite, as CI runs it.
test:
	scripts/test

# Benchmarks (against the test database): the header codec, the store, what
# enlisting adds to a transaction, and end-to-end dispatch next to a plain SQL loop.
bench:
	go run ./internal/tool/withdb -- sh -c "go test -run '^$$' -bench . -benchmem ./headers/ ./store/ ./enlist/ && \
		go test -run '^$$' -bench . -benchtime 20000x ./dispatch/"

# A short fuzzing session of the header codec and of schema and prefix validation.
fuzz:
	go test -run '^$$' -fuzz FuzzDecode -fuzztime 60s ./headers/
	go test -run '^$$' -fuzz FuzzRoundTrip -fuzztime 60s ./headers/
	go test -run '^$$' -fuzz FuzzOptionsValidate -fuzztime 60s ./store/

# The end-to-end demo: a throwaway PostgreSQL, an embedded NATS JetStream server,
# all four entry points and every dispatcher, checked message by message.
.PHONY: demo
demo:
	go run ./cmd/relayer demo
