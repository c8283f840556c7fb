# Stand-in for gcr.io/distroless/static-debian12:nonroot: CA certificates,
# the nonroot user (65532) and nothing else. Context: this directory.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE} AS certs
RUN mkdir -p /out/etc/ssl/certs /out/tmp /out/home/nonroot \
 && cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/ \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /out/etc/passwd \
 && printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' > /out/etc/group \
 && chmod 1777 /out/tmp && chown 65532:65532 /out/home/nonroot

FROM scratch
COPY --from=certs /out/ /
USER 65532:65532
WORKDIR /home/nonroot
