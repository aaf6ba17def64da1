{{/*
Written by hand (tools/chart.py generates templates/generated/ and values.yaml).
Object names are the kustomize base's, fixed: the webhook configuration and
the policies are cluster-scoped, so one release per cluster.
*/}}

{{/* Labels added to every object's metadata (never to selectors). */}}
{{- define "aibom-rollup.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "aibom-rollup.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The webhook's TLS material as YAML {ca.crt, tls.crt, tls.key} (base64), made
once per render and shared by the Secret and the caBundle (memoized in
.Values.certs, which every template sees):
- provided: the PEM files of `aibom-rollup certs` from values;
- generate: the Secret already in the cluster if it has all three keys (so an
  upgrade keeps the CA and the caBundle), else a new CA and a serving
  certificate for the Service's DNS names. `helm template` and
  `--dry-run=client` cannot look up, so they always show a fresh pair.
*/}}
{{- define "aibom-rollup.tls" -}}
{{- if not (hasKey .Values.certs "_rendered") }}
{{- $out := dict }}
{{- if eq .Values.certs.mode "provided" }}
{{- $p := .Values.certs.provided }}
{{- $_ := set $out "ca.crt" (required "certs.provided.caCrt: the ca.crt of `aibom-rollup certs` (--set-file)" $p.caCrt | b64enc) }}
{{- $_ := set $out "tls.crt" (required "certs.provided.tlsCrt: the tls.crt of `aibom-rollup certs` (--set-file)" $p.tlsCrt | b64enc) }}
{{- $_ := set $out "tls.key" (required "certs.provided.tlsKey: the tls.key of `aibom-rollup certs` (--set-file)" $p.tlsKey | b64enc) }}
{{- else if eq .Values.certs.mode "generate" }}
{{- $found := lookup "v1" "Secret" .Release.Namespace "aibom-rollup-webhook-tls" }}
{{- $data := dict }}
{{- if $found }}{{ $data = $found.data | default dict }}{{ end }}
{{- if and (hasKey $data "ca.crt") (hasKey $data "tls.crt") (hasKey $data "tls.key") }}
{{- $out = pick $data "ca.crt" "tls.crt" "tls.key" }}
{{- else }}
{{- $svc := "aibom-rollup-webhook" }}
{{- $ns := .Release.Namespace }}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) }}
{{- $ca := genCA "aibom-rollup webhook CA" (int .Values.certs.generate.caDays) }}
{{- $cert := genSignedCert (printf "%s.%s.svc" $svc $ns) nil $names (int .Values.certs.generate.days) $ca }}
{{- $_ := set $out "ca.crt" ($ca.Cert | b64enc) }}
{{- $_ := set $out "tls.crt" ($cert.Cert | b64enc) }}
{{- $_ := set $out "tls.key" ($cert.Key | b64enc) }}
{{- end }}
{{- else if ne .Values.certs.mode "cert-manager" }}
{{- fail (printf "certs.mode must be generate, provided or cert-manager, not %q" .Values.certs.mode) }}
{{- end }}
{{- $_ := set .Values.certs "_rendered" $out }}
{{- end }}
{{- toYaml (get .Values.certs "_rendered") }}
{{- end }}

{{/*
The edge-proof key (docs/provenance-guard.md) (base64 text of 32 random bytes, as
`aibom-rollup certs` writes tls/provenance.key), base64-encoded for a Secret's
data: .Values.provenanceKey, else the Secret in the cluster, else new.
Rotating it invalidates every proof, so an upgrade keeps the cluster's.
*/}}
{{- define "aibom-rollup.provenanceKey" -}}
{{- if .Values.provenanceKey }}
{{- printf "%s\n" (trim .Values.provenanceKey) | b64enc }}
{{- else }}
{{- $found := lookup "v1" "Secret" .Release.Namespace "aibom-rollup-provenance-key" }}
{{- if and $found $found.data (hasKey $found.data "provenance.key") }}
{{- index $found.data "provenance.key" }}
{{- else }}
{{- printf "%s\n" (randBytes 32) | b64enc }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The annotator's document-signing key (docs/signing.md), a PEM, base64-encoded
for a Secret's data: .Values.signingKey, else the Secret in the cluster, else a
new Ed25519 key. An upgrade keeps the cluster's (a new key would be published
beside it and every document re-signed: not what an upgrade should do).
*/}}
{{- define "aibom-rollup.signingKey" -}}
{{- if .Values.signingKey }}
{{- printf "%s\n" (trim .Values.signingKey) | b64enc }}
{{- else }}
{{- $found := lookup "v1" "Secret" .Release.Namespace "aibom-rollup-signing-key" }}
{{- if and $found $found.data (hasKey $found.data "tls.key") }}
{{- index $found.data "tls.key" }}
{{- else }}
{{- genPrivateKey "ed25519" | b64enc }}
{{- end }}
{{- end }}
{{- end }}
