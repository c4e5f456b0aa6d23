{{/* Names, labels and the checks every template shares. */}}

{{- define "kafka-health.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kafka-health.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kafka-health.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "kafka-health.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one component: include "kafka-health.selectorLabels" (list . "serve") */}}
{{- define "kafka-health.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "kafka-health.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "kafka-health.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kafka-health.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kafka-health.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret holding tokens and the store URL: the chart's or auth.existingSecret. */}}
{{- define "kafka-health.secretName" -}}
{{- default (printf "%s-secrets" (include "kafka-health.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{- define "kafka-health.serviceURL" -}}
{{- printf "%s://%s.%s.svc:%d" (include "kafka-health.scheme" .) (include "kafka-health.fullname" .) .Release.Namespace (int .Values.service.port) }}
{{- end }}

{{- define "kafka-health.dataDir" -}}/var/lib/kafka-health/data{{- end }}
{{- define "kafka-health.storeDir" -}}/var/lib/kafka-health/store{{- end }}
{{- define "kafka-health.tokensDir" -}}/etc/kafka-health/tokens{{- end }}
{{- define "kafka-health.zookeeperDir" -}}/etc/kafka-health/zookeeper{{- end }}
{{- define "kafka-health.tlsDir" -}}/etc/kafka-health/tls{{- end }}

{{/* The secured ZooKeeper's Secret: the chart's (<fullname>-zookeeper) or kafka.zookeeperClient.existingSecret. */}}
{{- define "kafka-health.zookeeperSecretName" -}}
{{- default (printf "%s-zookeeper" (include "kafka-health.fullname" .)) .Values.kafka.zookeeperClient.existingSecret }}
{{- end }}

{{/* What the chart's own ZooKeeper Secret holds under each key (the key is also the mounted file's name). */}}
{{- define "kafka-health.zookeeperContent" -}}
{{- $zk := .Values.kafka.zookeeperClient }}
{{- toJson (dict
  "properties" (list "client.properties" $zk.properties)
  "jaasConfig" (list "jaas.conf" $zk.jaasConfig)
  "truststore" (list "truststore.pem" $zk.ssl.truststore)
  "keystore" (list "keystore.pem" $zk.ssl.keystore)
  "keystorePassword" (list "keystore-password" $zk.ssl.keystorePassword)
  "authDigest" (list "auth-digest" $zk.authDigest)) }}
{{- end }}

{{/* JSON {value name: the Secret's key} of what this release has: with existingSecret the keys named in
kafka.zookeeperClient.secretKeys, else the values that are set, under the chart's own key names. */}}
{{- define "kafka-health.zookeeperKeys" -}}
{{- $zk := .Values.kafka.zookeeperClient }}
{{- $keys := dict }}
{{- range $name, $entry := include "kafka-health.zookeeperContent" . | fromJson }}
{{- if $zk.existingSecret }}
{{- with index $zk.secretKeys $name }}{{ $_ := set $keys $name . }}{{ end }}
{{- else if index $entry 1 }}
{{- $_ := set $keys $name (index $entry 0) }}
{{- end }}
{{- end }}
{{- toJson $keys }}
{{- end }}

{{/* The ZooKeeper settings that point at the mounted files (ConfigMap: no secrets). */}}
{{- define "kafka-health.zookeeperSettings" -}}
{{- $zk := .Values.kafka.zookeeperClient }}
{{- $keys := include "kafka-health.zookeeperKeys" . | fromJson }}
{{- $dir := include "kafka-health.zookeeperDir" . }}
{{- $env := dict }}
{{- if hasKey $keys "properties" }}{{ $_ := set $env "KAFKA_HEALTH_ZOOKEEPER__CLIENT_CONFIG" (printf "%s/client.properties" $dir) }}{{ end }}
{{- if hasKey $keys "jaasConfig" }}{{ $_ := set $env "KAFKA_HEALTH_ZOOKEEPER__SASL_JAAS_CONFIG" (printf "%s/jaas.conf" $dir) }}{{ end }}
{{- with $zk.saslClientConfig }}{{ $_ := set $env "KAFKA_HEALTH_ZOOKEEPER__SASL_CLIENTCONFIG" . }}{{ end }}
{{- if $zk.ssl.clientEnable }}
{{- $_ := set $env "KAFKA_HEALTH_ZOOKEEPER__SSL_CLIENT_ENABLE" "true" }}
{{- $_ := set $env "KAFKA_HEALTH_ZOOKEEPER__SSL_ENDPOINT_IDENTIFICATION_ALGORITHM" $zk.ssl.endpointIdentificationAlgorithm }}
{{- end }}
{{- if hasKey $keys "truststore" }}
{{- $_ := set $env "KAFKA_HEALTH_ZOOKEEPER__SSL_TRUSTSTORE_LOCATION" (printf "%s/truststore.pem" $dir) }}
{{- $_ := set $env "KAFKA_HEALTH_ZOOKEEPER__SSL_TRUSTSTORE_TYPE" "PEM" }}
{{- end }}
{{- if hasKey $keys "keystore" }}
{{- $_ := set $env "KAFKA_HEALTH_ZOOKEEPER__SSL_KEYSTORE_LOCATION" (printf "%s/keystore.pem" $dir) }}
{{- $_ := set $env "KAFKA_HEALTH_ZOOKEEPER__SSL_KEYSTORE_TYPE" "PEM" }}
{{- end }}
{{- if $zk.setAcl }}{{ $_ := set $env "KAFKA_HEALTH_ZOOKEEPER__SET_ACL" "true" }}{{ end }}
{{- toJson $env }}
{{- end }}

{{/* The ZooKeeper passwords, from the Secret (every container reads the settings). */}}
{{- define "kafka-health.zookeeperEnv" -}}
{{- $keys := include "kafka-health.zookeeperKeys" . | fromJson }}
{{- range $name, $variable := dict "keystorePassword" "KAFKA_HEALTH_ZOOKEEPER__SSL_KEYSTORE_PASSWORD" "authDigest" "KAFKA_HEALTH_ZOOKEEPER__AUTH_DIGEST" }}
{{- if hasKey $keys $name }}
- name: {{ $variable }}
  valueFrom:
    secretKeyRef:
      name: {{ include "kafka-health.zookeeperSecretName" $ }}
      key: {{ index $keys $name }}
{{- end }}
{{- end }}
{{- end }}

{{/* The ZooKeeper files, mounted read-only in every container (the settings are checked at start-up). */}}
{{- define "kafka-health.zookeeperFiles" -}}
{{- $keys := include "kafka-health.zookeeperKeys" . | fromJson }}
{{- $files := dict "properties" "client.properties" "jaasConfig" "jaas.conf" "truststore" "truststore.pem" "keystore" "keystore.pem" }}
{{- range $name, $file := $files }}{{ if hasKey $keys $name }}{{ $file }} {{ end }}{{ end }}
{{- end }}
{{- define "kafka-health.zookeeperMount" -}}
{{- if include "kafka-health.zookeeperFiles" . }}
- name: zookeeper
  mountPath: {{ include "kafka-health.zookeeperDir" . }}
  readOnly: true
{{- end }}
{{- end }}
{{- define "kafka-health.zookeeperVolume" -}}
{{- if include "kafka-health.zookeeperFiles" . }}
{{- $keys := include "kafka-health.zookeeperKeys" . | fromJson }}
- name: zookeeper
  secret:
    secretName: {{ include "kafka-health.zookeeperSecretName" . }}
    defaultMode: 0440
    items:
      {{- range $name, $file := dict "properties" "client.properties" "jaasConfig" "jaas.conf" "truststore" "truststore.pem" "keystore" "keystore.pem" }}
      {{- if hasKey $keys $name }}
      - key: {{ index $keys $name }}
        path: {{ $file }}
      {{- end }}
      {{- end }}
{{- end }}
{{- end }}

{{/* The service's own TLS: http or https. */}}
{{- define "kafka-health.scheme" -}}
{{- if .Values.serve.tls.secretName }}https{{ else }}http{{ end }}
{{- end }}

{{/* Is a tokens file / clear tokens / a store URL in the Secret? */}}
{{- define "kafka-health.hasTokensFile" -}}
{{- if .Values.auth.existingSecret }}{{ if .Values.auth.secretKeys.tokensFile }}true{{ end }}
{{- else if .Values.auth.tokensFile }}true{{ end }}
{{- end }}
{{- define "kafka-health.hasTokens" -}}
{{- if .Values.auth.existingSecret }}{{ if .Values.auth.secretKeys.tokens }}true{{ end }}
{{- else if .Values.auth.tokens }}true{{ end }}
{{- end }}

{{/* The samples' transport, as `collect --sink` and `analytics --source` take it. */}}
{{- define "kafka-health.transport" -}}
{{- if eq .Values.analytics.transport.type "kafka" }}
{{- printf "kafka:%s/%s" .Values.analytics.transport.kafka.bootstrap .Values.analytics.transport.kafka.topic }}
{{- else }}
{{- printf "spool:%s/spool" (include "kafka-health.dataDir" .) }}
{{- end }}
{{- end }}

{{/* Fails the release on values that cannot work (the schema checks types and names). */}}
{{- define "kafka-health.validate" -}}
{{- if not .Values.kafka.zookeeper }}
{{- fail "kafka.zookeeper is required: the cluster's ZooKeeper, HOST:PORT[,HOST:PORT...][/chroot]" }}
{{- end }}
{{- if and (gt (int .Values.serve.replicaCount) 1) (ne .Values.store.type "postgresql") }}
{{- fail "serve.replicaCount > 1 needs store.type=postgresql: every replica reads and writes the same store, which a SQLite file on one volume cannot be" }}
{{- end }}
{{- if and (eq .Values.store.type "postgresql") (not .Values.store.postgresql.url) (not (and .Values.auth.existingSecret .Values.auth.secretKeys.storeUrl)) }}
{{- fail "store.type=postgresql needs store.postgresql.url, or auth.existingSecret with the URL under auth.secretKeys.storeUrl" }}
{{- end }}
{{- if and .Values.analytics.enabled (not (hasPrefix "local" .Values.analytics.spark.master)) (ne .Values.analytics.transport.type "kafka") }}
{{- fail "analytics.spark.master is an external Spark master: its executors cannot read the pod's spool directory, so set analytics.transport.type=kafka" }}
{{- end }}
{{- $zk := .Values.kafka.zookeeperClient }}
{{- if and (or $zk.ssl.truststore $zk.ssl.keystore) (not $zk.ssl.clientEnable) (not $zk.properties) (not $zk.existingSecret) }}
{{- fail "kafka.zookeeperClient.ssl.truststore/keystore without ssl.clientEnable: the stores would be mounted and TLS left off; set kafka.zookeeperClient.ssl.clientEnable=true" }}
{{- end }}
{{- if and .Values.analytics.enabled (eq .Values.analytics.transport.type "kafka") (not .Values.analytics.transport.kafka.bootstrap) }}
{{- fail "analytics.transport.type=kafka needs analytics.transport.kafka.bootstrap (HOST:PORT[,HOST:PORT...])" }}
{{- end }}
{{- end }}

{{/* The service's tokens (from the Secret). */}}
{{- define "kafka-health.tokenEnv" -}}
{{- if eq (include "kafka-health.hasTokens" .) "true" }}
- name: KAFKA_HEALTH_SERVICE__TOKENS
  valueFrom:
    secretKeyRef:
      name: {{ include "kafka-health.secretName" . }}
      key: {{ .Values.auth.secretKeys.tokens }}
      optional: {{ not (empty .Values.auth.existingSecret) }}
{{- end }}
{{- if eq (include "kafka-health.hasTokensFile" .) "true" }}
- name: KAFKA_HEALTH_SERVICE__TOKENS_FILE
  value: {{ printf "%s/%s" (include "kafka-health.tokensDir" .) .Values.auth.secretKeys.tokensFile | quote }}
{{- end }}
{{- end }}

{{/* The PostgreSQL store's URL (from the Secret); the SQLite store's is in the ConfigMap. */}}
{{- define "kafka-health.storeEnv" -}}
{{- if eq .Values.store.type "postgresql" }}
- name: KAFKA_HEALTH_ANALYTICS__STORE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "kafka-health.secretName" . }}
      key: {{ .Values.auth.secretKeys.storeUrl }}
{{- end }}
{{- end }}

{{/* Restart the pods when the settings or the secrets change. */}}
{{- define "kafka-health.checksums" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
checksum/secret: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
checksum/zookeeper: {{ include (print .Template.BasePath "/zookeeper-secret.yaml") . | sha256sum }}
{{- end }}

{{/* spark-submit's arguments for the driver PySpark starts in the analytics container. With an external
master (client mode) the executors connect back to the pod's IP on fixed ports. */}}
{{- define "kafka-health.sparkSubmitArgs" -}}
{{- $args := list "--driver-memory" .Values.analytics.spark.driverMemory }}
{{- if not (hasPrefix "local" .Values.analytics.spark.master) }}
{{- $args = concat $args (list
  "--conf" "spark.driver.host=$(POD_IP)"
  "--conf" "spark.driver.bindAddress=0.0.0.0"
  "--conf" (printf "spark.driver.port=%d" (int .Values.analytics.spark.driverPort))
  "--conf" (printf "spark.blockManager.port=%d" (int .Values.analytics.spark.blockManagerPort))
  "--conf" (printf "spark.driver.blockManager.port=%d" (int .Values.analytics.spark.blockManagerPort))
) }}
{{- end }}
{{- $args = concat $args .Values.analytics.spark.extraArgs (list "pyspark-shell") }}
{{- join " " $args }}
{{- end }}

{{- define "kafka-health.dnsEgress" -}}
- ports:
    - port: 53
      protocol: UDP
    - port: 53
      protocol: TCP
{{- end }}
