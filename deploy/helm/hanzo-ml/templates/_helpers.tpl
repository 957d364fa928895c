{{/* Labels every object carries; selectors use app.kubernetes.io/name alone, which never changes. */}}
{{- define "hanzo-ml.labels" -}}
app.kubernetes.io/part-of: hanzo-ml
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "hanzo-ml.image" -}}
{{ printf "%s:%s" .repository (toString .tag) }}
{{- end -}}

{{/* An image pinned by its digest when one is given (repository@sha256:...), else repository:tag. */}}
{{- define "hanzo-ml.pinnedImage" -}}
{{ if .digest }}{{ printf "%s@%s" .repository .digest }}{{ else }}{{ printf "%s:%s" .repository (toString .tag) }}{{ end }}
{{- end -}}

{{/* A scheduler.job_network peer (contracts/config.ts EgressPeerSchema) from its values, as one line of JSON. */}}
{{- define "hanzo-ml.egressPeer" -}}
{{- $p := dict "cidrs" (.cidrs | default list) -}}
{{- with .namespace }}{{ $_ := set $p "namespace" . }}{{ end -}}
{{- with .podLabels }}{{ $_ := set $p "pod_labels" . }}{{ end -}}
{{- with .ports }}{{ $_ := set $p "ports" . }}{{ end -}}
{{ toJson $p }}
{{- end -}}

{{- define "hanzo-ml.publicUrl" -}}
{{ .Values.api.publicUrl | default (printf "http://hanzo-ml-api.%s.svc:8057" .Release.Namespace) }}
{{- end -}}

{{/* Where the Temporal client certificate, key and CA are mounted (temporal.tls_* point into it). */}}
{{- define "hanzo-ml.temporalTlsDir" -}}/etc/hanzo-ml-temporal-tls{{- end -}}

{{/* The environment of every control-plane container: the config file, and credentials from Secrets. */}}
{{- define "hanzo-ml.env" -}}
- { name: HANZO_ML_CONFIG, value: /etc/hanzo-ml/config.yaml }
- { name: HANZO_ML_HOME, value: /var/lib/hanzo-ml }
- name: HANZO_ML_DATABASE_URL
  valueFrom: { secretKeyRef: { name: {{ .Values.database.secret.name }}, key: {{ .Values.database.secret.key }} } }
- name: HANZO_ML_STORAGE_ACCESS_KEY
  valueFrom: { secretKeyRef: { name: {{ .Values.storage.secret.name }}, key: {{ .Values.storage.secret.accessKeyKey }} } }
- name: HANZO_ML_STORAGE_SECRET_KEY
  valueFrom: { secretKeyRef: { name: {{ .Values.storage.secret.name }}, key: {{ .Values.storage.secret.secretKeyKey }} } }
- name: HANZO_ML_AUTH_SESSION_SECRET
  valueFrom: { secretKeyRef: { name: {{ .Values.auth.sessionSecret.name }}, key: {{ .Values.auth.sessionSecret.key }}, optional: true } }
{{- end -}}

{{- define "hanzo-ml.podSecurityContext" -}}
securityContext: { runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, seccompProfile: { type: RuntimeDefault } }
{{- end -}}

{{- define "hanzo-ml.containerSecurityContext" -}}
securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: [ALL] } }
{{- end -}}

{{/* The API's and the worker's mounts: the config, a writable home and /tmp (tsx's compile cache), the TLS files. */}}
{{- define "hanzo-ml.volumeMounts" -}}
- { name: config, mountPath: /etc/hanzo-ml, readOnly: true }
- { name: home, mountPath: /var/lib/hanzo-ml }
- { name: tmp, mountPath: /tmp }
{{- if .Values.temporal.tls.enabled }}
- { name: temporal-tls, mountPath: {{ include "hanzo-ml.temporalTlsDir" . }}, readOnly: true }
{{- end }}
{{- end -}}

{{- define "hanzo-ml.volumes" -}}
- name: config
  configMap: { name: hanzo-ml-config }
- { name: home, emptyDir: {} }
- { name: tmp, emptyDir: {} }
{{- if .Values.temporal.tls.enabled }}
- name: temporal-tls
  secret:
    secretName: {{ required "temporal.tls.secretName: the Secret with Temporal's client certificate, key and CA" .Values.temporal.tls.secretName }}
    items:
      - { key: {{ .Values.temporal.tls.certKey }}, path: tls.crt }
      - { key: {{ .Values.temporal.tls.keyKey }}, path: tls.key }
      {{- if .Values.temporal.tls.caKey }}
      - { key: {{ .Values.temporal.tls.caKey }}, path: ca.crt }
      {{- end }}
{{- end }}
{{- end -}}
