"""The Data Manager (tf.data service, pipelines, validation): see its issue."""
