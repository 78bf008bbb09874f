# Builds the outbox-relay binary into a minimal, non-root image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /outbox-relay ./cmd/outbox-relay

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /outbox-relay /outbox-relay
USER nonroot
EXPOSE 9464
ENTRYPOINT ["/outbox-relay"]
CMD ["run"]
