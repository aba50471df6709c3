from lightning_tf.cli import main

main()
