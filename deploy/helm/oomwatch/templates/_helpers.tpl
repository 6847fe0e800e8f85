{{- define "oomwatch.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "oomwatch.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "oomwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "oomwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "oomwatch.labels" -}}
{{ include "oomwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "oomwatch.validateMode" -}}
{{- if not (has .Values.mode (list "daemonset" "sidecar")) -}}
{{- fail (printf "mode must be daemonset or sidecar, not %q" .Values.mode) -}}
{{- end -}}
{{- end -}}

{{/* HTTPS or HTTP: how the probes and the monitor reach oomwatch (webConfig). */}}
{{- define "oomwatch.scheme" -}}
{{- $w := .Values.webConfig -}}
{{- if not $w.enabled -}}HTTP
{{- else if $w.scheme -}}
{{- if not (has (upper $w.scheme) (list "HTTP" "HTTPS")) -}}
{{- fail (printf "webConfig.scheme must be HTTP or HTTPS, not %q" $w.scheme) -}}
{{- end -}}
{{- upper $w.scheme -}}
{{- else if and (not $w.existingSecret) (regexMatch "(?m)^tls_server_config:" $w.content) -}}HTTPS
{{- else -}}HTTP
{{- end -}}
{{- end -}}

{{/* A probe of oomwatch: /healthz needs no password; with client certificates required, the port alone. */}}
{{- define "oomwatch.probe" -}}
{{- if and .Values.webConfig.enabled (regexMatch "(?m)^[^#]*RequireAndVerifyClientCert" .Values.webConfig.content) -}}
tcpSocket: {port: metrics}
{{- else -}}
httpGet: {path: /healthz, port: metrics, scheme: {{ include "oomwatch.scheme" . }}}
{{- end -}}
{{- end -}}

{{/* The oomwatch container, the same in both modes. */}}
{{- define "oomwatch.container" -}}
- name: oomwatch
  image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["run"]
  env:
    - {name: OOMWATCH_LISTEN, value: "0.0.0.0:{{ .Values.port }}"}
    {{- with .Values.alertmanagerUrls }}
    - {name: OOMWATCH_ALERTMANAGER_URL, value: {{ join "," . | quote }}}
    {{- end }}
    {{- if eq .Values.mode "sidecar" }}
    - {name: OOMWATCH_ENGINE_URL, value: "http://127.0.0.1:{{ .Values.server.port }}"}
    - {name: SERVER_CONTAINER, value: {{ .Values.server.name | quote }}}
    {{- end }}
    - {name: OOMWATCH_PROBE_DIR, value: {{ .Values.probe.dir | quote }}}
    - {name: NVIDIA_VISIBLE_DEVICES, value: "all"}
    - {name: NVIDIA_DRIVER_CAPABILITIES, value: "utility"}  # NVML only: no CUDA context
    # the `node` label on every series and pushed alert (inside a pod the host name is the pod's name)
    - name: NODE_NAME
      valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: POD_NAMESPACE
      valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
    {{- if .Values.webConfig.enabled }}
    - {name: OOMWATCH_WEB_CONFIG_FILE, value: /etc/oomwatch/web/web-config.yml}
    {{- end }}
    {{- with .Values.alertmanagerAuth }}
    {{- if .secret }}
    {{- if .bearerTokenKey }}
    - {name: OOMWATCH_ALERTMANAGER_BEARER_TOKEN_FILE, value: "/etc/oomwatch/alertmanager/{{ .bearerTokenKey }}"}
    {{- end }}
    {{- if .basicAuthUser }}
    - {name: OOMWATCH_ALERTMANAGER_BASIC_AUTH_USER, value: {{ .basicAuthUser | quote }}}
    {{- end }}
    {{- if .basicAuthPasswordKey }}
    - {name: OOMWATCH_ALERTMANAGER_BASIC_AUTH_PASSWORD_FILE, value: "/etc/oomwatch/alertmanager/{{ .basicAuthPasswordKey }}"}
    {{- end }}
    {{- if .caKey }}
    - {name: OOMWATCH_ALERTMANAGER_CA_FILE, value: "/etc/oomwatch/alertmanager/{{ .caKey }}"}
    {{- end }}
    {{- end }}
    {{- end }}
    {{- range $k, $v := .Values.extraEnv }}
    - {name: {{ $k }}, value: {{ $v | quote }}}
    {{- end }}
  ports: [{name: metrics, containerPort: {{ .Values.port }}}]
  livenessProbe:
    {{- include "oomwatch.probe" . | nindent 4 }}
    periodSeconds: 20
  readinessProbe:
    {{- if .Values.webConfig.enabled }}
    {{- include "oomwatch.probe" . | nindent 4 }}
    {{- else }}
    httpGet: {path: /metrics, port: metrics}
    {{- end }}
    periodSeconds: 10
  resources: {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities: {drop: [ALL]}
  volumeMounts:
    {{- if .Values.probe.enabled }}
    - {name: oomwatch-probe, mountPath: {{ .Values.probe.dir | quote }}}
    {{- end }}
    {{- if eq .Values.mode "daemonset" }}
    - {name: pod-logs, mountPath: /var/log/pods, readOnly: true}
    {{- end }}
    {{- if .Values.alertmanagerAuth.secret }}
    - {name: alertmanager-auth, mountPath: /etc/oomwatch/alertmanager, readOnly: true}
    {{- end }}
    {{- if .Values.webConfig.enabled }}
    - {name: web-config, mountPath: /etc/oomwatch/web, readOnly: true}
    {{- if .Values.webConfig.tlsSecret }}
    - {name: web-tls, mountPath: /etc/oomwatch/tls, readOnly: true}
    {{- end }}
    {{- end }}
{{- end -}}

{{/* Pod-level settings shared by both modes. */}}
{{- define "oomwatch.podCommon" -}}
{{- with .Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{- define "oomwatch.volumes" -}}
{{- if .Values.probe.enabled }}
{{- if eq .Values.mode "sidecar" }}
- {name: oomwatch-probe, emptyDir: {medium: Memory, sizeLimit: {{ .Values.probe.sizeLimit }}}}
{{- else }}
- {name: oomwatch-probe, hostPath: {path: {{ .Values.probe.hostPath | quote }}, type: DirectoryOrCreate}}
{{- end }}
{{- end }}
{{- if eq .Values.mode "daemonset" }}
- {name: pod-logs, hostPath: {path: /var/log/pods, type: Directory}}
{{- end }}
{{- if .Values.alertmanagerAuth.secret }}
- {name: alertmanager-auth, secret: {secretName: {{ .Values.alertmanagerAuth.secret }}}}
{{- end }}
{{- if .Values.webConfig.enabled }}
- {name: web-config, secret: {secretName: {{ .Values.webConfig.existingSecret | default (printf "%s-web-config" (include "oomwatch.fullname" .)) }}}}
{{- if .Values.webConfig.tlsSecret }}
- {name: web-tls, secret: {secretName: {{ .Values.webConfig.tlsSecret }}}}
{{- end }}
{{- end }}
{{- end -}}
