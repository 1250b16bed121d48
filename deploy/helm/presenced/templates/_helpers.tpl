{{/* Names: <release>-presenced[-<plane>], at most 63 characters. */}}
{{- define "presenced.fullname" -}}
{{- printf "%s-presenced" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "presenced.planeName" -}}
{{- printf "%s-%s" (include "presenced.fullname" .root) .plane | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "presenced.labels" -}}
app.kubernetes.io/name: presenced
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "presenced.selectorLabels" -}}
app.kubernetes.io/name: presenced
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .plane }}
{{- end -}}

{{- define "presenced.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The Secret of one group: its name in values, else <fullname>-<group>. */}}
{{- define "presenced.secretName" -}}
{{- $g := index .root.Values.secrets .group -}}
{{- $g.name | default (printf "%s-%s" (include "presenced.fullname" .root) (.group | kebabcase)) -}}
{{- end -}}

{{/* One environment variable from a Secret key. */}}
{{- define "presenced.secretRef" -}}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ include "presenced.secretName" (dict "root" .root "group" .group) }}
      key: {{ .key }}
      {{- if .optional }}
      optional: true
      {{- end }}
{{- end -}}

{{/*
The secrets a process gets, from its roles: the key distribution of
docker-compose.yml. The admit plane gets no database credentials, browse only
the read-only login (as postgres.url too: it never opens the main pool, and
an empty postgres.url would start a development database), booking only the
pass verify keys.
*/}}
{{- define "presenced.secretEnv" -}}
{{- $root := .root -}}
{{- $roles := .roles -}}
{{- $writes := false -}}
{{- range list "ingest" "count" "presence" "booking" "worker" -}}
{{- if has . $roles }}{{ $writes = true }}{{ end -}}
{{- end -}}
{{- $payments := or (has "booking" $roles) (has "worker" $roles) -}}
{{ include "presenced.secretRef" (dict "root" $root "group" "redis" "env" "PRESENCED_REDIS_URL" "key" "url") }}
{{ include "presenced.secretRef" (dict "root" $root "group" "auth" "env" "PRESENCED_API_KEY" "key" "apiKey") }}
{{ include "presenced.secretRef" (dict "root" $root "group" "auth" "env" "PRESENCED_JWT_SECRET" "key" "jwtSecret" "optional" true) }}
{{- if $writes }}
{{ include "presenced.secretRef" (dict "root" $root "group" "postgres" "env" "PRESENCED_POSTGRES_URL" "key" "url") }}
{{- end }}
{{- if has "browse" $roles }}
{{- if not $writes }}
{{ include "presenced.secretRef" (dict "root" $root "group" "postgres" "env" "PRESENCED_POSTGRES_URL" "key" "readonlyUrl") }}
{{- end }}
{{ include "presenced.secretRef" (dict "root" $root "group" "postgres" "env" "PRESENCED_POSTGRES_READONLY_URL" "key" "readonlyUrl") }}
{{- end }}
{{- if has "booking" $roles }}
{{ include "presenced.secretRef" (dict "root" $root "group" "postgres" "env" "PRESENCED_POSTGRES_WEBHOOK_URL" "key" "webhookUrl" "optional" true) }}
{{ include "presenced.secretRef" (dict "root" $root "group" "passVerify" "env" "PRESENCED_WAITINGROOM_VERIFY_KEYS" "key" "verifyKeys") }}
{{- end }}
{{- if has "admit" $roles }}
{{ include "presenced.secretRef" (dict "root" $root "group" "passSigning" "env" "PRESENCED_WAITINGROOM_SIGNING_KEY" "key" "signingKey") }}
{{- end }}
{{- if has "ingest" $roles }}
{{ include "presenced.secretRef" (dict "root" $root "group" "redis" "env" "PRESENCED_VIEWERS_RATELIMIT_REDIS_URL" "key" "ratelimitUrl" "optional" true) }}
{{ include "presenced.secretRef" (dict "root" $root "group" "cookie" "env" "PRESENCED_VIEWERS_COOKIE_SIGNING_KEY" "key" "signingKey") }}
{{ include "presenced.secretRef" (dict "root" $root "group" "cookie" "env" "PRESENCED_VIEWERS_COOKIE_VERIFY_KEYS" "key" "verifyKeys" "optional" true) }}
{{- end }}
{{- if $payments }}
{{ include "presenced.secretRef" (dict "root" $root "group" "payments" "env" "PRESENCED_PAYMENTS_TICKET_KEY" "key" "ticketKey") }}
{{ include "presenced.secretRef" (dict "root" $root "group" "payments" "env" "PRESENCED_PAYMENTS_MANIFEST_KEY" "key" "manifestKey") }}
{{ include "presenced.secretRef" (dict "root" $root "group" "payments" "env" "PRESENCED_PAYMENTS_STRIPE_SECRET_KEY" "key" "stripeSecretKey" "optional" true) }}
{{ include "presenced.secretRef" (dict "root" $root "group" "payments" "env" "PRESENCED_PAYMENTS_STRIPE_WEBHOOK_SECRETS" "key" "stripeWebhookSecrets" "optional" true) }}
{{- end }}
{{- end -}}

{{/* Settings every presenced container shares. */}}
{{- define "presenced.commonEnv" -}}
- name: PRESENCED_AUTH_DEV_SECRETS
  value: "false"
- name: PRESENCED_DATA_DIR
  value: /var/lib/presenced
- name: PRESENCED_POSTGRES_MIGRATE_ON_START
  value: "false"
- name: PRESENCED_HTTP_SHUTDOWN_TIMEOUT
  value: {{ printf "%ds" (int .Values.shutdownSeconds) | quote }}
{{- range $k, $v := .Values.env }}
- name: {{ $k }}
  value: {{ $v | toString | quote }}
{{- end }}
{{- end -}}
